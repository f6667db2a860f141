package rnic

import (
	"fmt"
	"runtime/debug"
	"time"

	"golang.org/x/sys/unix"
)

// Faults on client memory (issue 13, point 2). The daemon maps client
// memfds (rings, registered memory) and refuses memory whose pages can
// vanish (rnic/memory.go: checkClientMemory), so a fault should not happen. If
// one does all the same, it must fail the client whose memory faulted,
// never the daemon: the goroutines that touch client memory — the engine,
// and each session's control goroutine (which reads ring headers) — run
// with debug.SetPanicOnFault(true), which turns a SIGBUS or SIGSEGV at a
// non-nil address into a run-time panic of that goroutine, recovered here
// at the boundary of the work for one client:
//   - an engine pass serves one QP at a time and notes its session
//     (engine.cur): a fault tears that session down (its QPs, CQs, MRs)
//     and closes its connection; the pass ends and the next one serves
//     the other sessions;
//   - a control request (engine.Do, or the request's own goroutine) that
//     faults fails with EFAULT and the session is closed.
// Any other panic is a bug in the daemon and is re-raised.

// FaultAddr reports whether r (a recovered value) is a memory fault that
// SetPanicOnFault turned into a panic, and its address.
func FaultAddr(r any) (uintptr, bool) {
	if e, ok := r.(interface{ Addr() uintptr }); ok {
		return e.Addr(), true
	}
	return 0, false
}

// guardedPass is pass with fault containment (the engine goroutine has
// SetPanicOnFault on: see run).
func (e *Engine) guardedPass(now time.Time) (work bool) {
	defer func() {
		r := recover()
		if r == nil {
			return
		}
		addr, ok := FaultAddr(r)
		if !ok {
			panic(r)
		}
		e.failFaulted(e.cur, addr)
		work = true
	}()
	work = e.pass(now)
	e.cur = nil
	return work
}

// failFaulted tears down the session whose memory faulted at addr (engine
// side) and closes its connection, so that its client sees ENODEV.
func (e *Engine) failFaulted(s *Session, addr uintptr) {
	e.cur = nil
	e.staged = e.staged[:0]
	e.Count(nil, cMemoryFaults, 1)
	if s == nil {
		// A fault outside any session's work would be a daemon bug: say so
		// loudly rather than hide it.
		panic(fmt.Sprintf("verbsd: memory fault at %#x outside any session's work", addr))
	}
	// With several engines (rnic/engines.go) the teardown touches every
	// engine's state, so it is the command serve runs when the connection
	// closes; until then no engine serves the session (serveShared, due),
	// and only the first engine to fault says so.
	if e.Shared && s.faulted.Swap(true) {
		return
	}
	if log := s.Dev.Log; log != nil {
		log.Warnf("session %d (pid %d, uid %d): its shared memory faulted at %#x; session closed "+
			"(a page of the client's memory is not there: punched out after registration, rnic/holeguard.go, "+
			"or the memory went away under the daemon)", s.ID, s.Cred.Pid, s.Cred.Uid, addr)
	}
	if !e.Shared {
		e.TeardownSession(s)
	}
	if s.Conn != nil {
		s.Conn.UnixConn().CloseRead()
	}
}

// GuardedCommand runs a control command on the engine goroutine; a fault
// fails the command with EFAULT (the control request's reply).
func GuardedCommand(f func() error) (err error) {
	defer func() {
		r := recover()
		if r == nil {
			return
		}
		addr, ok := FaultAddr(r)
		if !ok {
			panic(r)
		}
		err = Errf(unix.EFAULT, "client shared memory faulted at %#x", addr)
	}()
	return f()
}

// GuardClientMemory turns faults of the calling goroutine into panics
// (see above); the goroutine must recover them at its boundary.
func GuardClientMemory() { debug.SetPanicOnFault(true) }
