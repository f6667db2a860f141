package rnic

import (
	"fmt"
	"runtime/debug"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// Faults on client memory. The daemon maps client
// memfds (rings, registered memory) and refuses memory whose pages can
// vanish (rnic/memory.go: checkClientMemory), so a fault should not happen. If
// one does all the same, it must fail the client whose memory faulted,
// never the daemon: the goroutines that touch client memory — the engine,
// and each session's control goroutine (which reads ring headers) — run
// with debug.SetPanicOnFault(true), which turns a SIGBUS or SIGSEGV at a
// non-nil address into a run-time panic of that goroutine, recovered here
// at the boundary of the work for one client:
//   - an engine pass serves one QP at a time and notes it and its
//     session (engine.curQP, engine.cur). A fault inside one of the
//     session's memory regions (a page the client punched out after
//     registration: rnic/holeguard.go) fails that QP alone: it goes to
//     ERROR (EventQPFatal, its work requests flushed), as for any local
//     error, and the session's other QPs go on. A fault anywhere else (a
//     ring, a CQ: the session's own queues are unusable) tears the session
//     down (its QPs, CQs, MRs) and closes its connection. Either way the
//     pass ends and the next one serves the other sessions;
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
		if q := e.curQP; q != nil && e.failRegionFault(q, addr) {
			e.cur, e.curQP = nil, nil
			e.staged = e.staged[:0]
		} else {
			e.failFaulted(e.cur, addr)
		}
		e.curQP = nil
		work = true
	}()
	work = e.pass(now)
	e.cur = nil
	return work
}

// failRegionFault moves q to ERROR if addr lies in a memory region of q's
// session (memfd form) and reports whether it did.
func (e *Engine) failRegionFault(q *QP, addr uintptr) bool {
	s := q.Session
	for _, m := range s.MRs {
		if m.Region == nil || len(m.Region.Pages) == 0 {
			continue
		}
		base := uintptr(unsafe.Pointer(unsafe.SliceData(m.Region.Pages)))
		if addr < base || addr-base >= uintptr(len(m.Region.Pages)) {
			continue
		}
		e.Count(q, CMemoryFaults, 1)
		if log := s.Dev.Log; log != nil {
			log.Warnf("session %d (pid %d, uid %d): a page of its memory region (lkey %#x) at offset %d is not there "+
				"(punched out after registration: the daemon does not allocate a client's pages, docs/memory-registration.md); "+
				"%v QP %d fails", s.ID, s.Cred.Pid, s.Cred.Uid, m.LKey, addr-base, q.Type, q.Handle)
		}
		e.ErrorQP(q, fmt.Sprintf("a page of memory region lkey %#x is not present (punched out after registration)", m.LKey))
		return true
	}
	return false
}

// failFaulted tears down the session whose memory faulted at addr (engine
// side) and closes its connection, so that its client sees ENODEV.
func (e *Engine) failFaulted(s *Session, addr uintptr) {
	e.cur = nil
	e.staged = e.staged[:0]
	e.Count(nil, CMemoryFaults, 1)
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
