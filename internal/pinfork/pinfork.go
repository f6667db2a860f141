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
package pinfork

import (
	"os/exec"
	"runtime"
	"sync"
)

type request struct {
	cmd  *exec.Cmd
	done chan error
}

var (
	once     sync.Once
	requests chan request
)

// forker is the goroutine of the pinned thread. It never returns, so its
// thread never exits.
func forker() {
	runtime.LockOSThread()
	for r := range requests {
		r.done <- r.cmd.Start()
	}
}

// Start is cmd.Start, forked from the pinned thread. Use it for every child
// that sets Pdeathsig.
func Start(cmd *exec.Cmd) error {
	once.Do(func() {
		requests = make(chan request)
		go forker()
	})
	done := make(chan error, 1)
	requests <- request{cmd, done}
	return <-done
}

// Run is cmd.Run with the fork done by Start.
func Run(cmd *exec.Cmd) error {
	if err := Start(cmd); err != nil {
		return err
	}
	return cmd.Wait()
}
