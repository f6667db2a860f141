// Package pinfork starts child processes from one OS thread that never
// ends, so that a child's parent-death signal means what it says.
//
// Linux delivers PR_SET_PDEATHSIG (prctl(2), syscall.SysProcAttr.Pdeathsig)
// when the *thread* that forked the child exits, not when the process does.
// The Go runtime ends an OS thread whenever a goroutine exits while locked to
// it (runtime.LockOSThread), which tests do on purpose to leave a thread in
// another network namespace. A daemon started from such a thread by chance
// is killed mid-test with SIGKILL. Forking every such child from a dedicated
// locked thread that lives as long as the process keeps the signal for the
// one case it is meant for: the test process dying.
//
// It imports nothing of the project, so that any test helper and command can
// use it.
package pinfork
