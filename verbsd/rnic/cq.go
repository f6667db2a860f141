package rnic

import (
	"fmt"
	"time"
	"unsafe"

	"github.com/iwarpd/iwarpd/proto"
	"golang.org/x/sys/unix"
)

// PostCQE writes one completion into c and publishes it, then signals the
// completion channel if the CQ is armed for it (ArmNext, or ArmSolicited
// and the completion is a solicited receive or an error). A full CQ is an
// overrun: the CQ is marked (Overrun word, EventCQError), every QP of the
// session using it goes to ERROR, and its completions are dropped from then
// on. It never blocks.
func (e *Engine) PostCQE(s *Session, c *CQ, cqe *proto.CQE) {
	if e.Shared { // rnic/engines.go: QPs of other engines may complete into c
		c.mu.Lock()
		defer c.mu.Unlock()
	}
	if c.overrun {
		return
	}
	slot, err := c.Prod.Next()
	if err != nil || slot == nil {
		e.overrunCQ(s, c, err)
		return
	}
	cqe.Put(slot)
	c.Prod.Publish()
	e.completed = true
	arm := c.Ring.Arm()
	v := arm.Load()
	solicited := cqe.Flags&proto.WCFlagSolicited != 0 || cqe.Status != proto.WCSuccess
	if (v == proto.ArmNext || (v == proto.ArmSolicited && solicited)) && arm.CompareAndSwap(v, proto.ArmNone) && c.Ch != nil {
		notifyChannel(c.Ch.FD)
	}
}

// notifyChannel adds 1 to a client's completion-channel eventfd without ever
// blocking the engine: the descriptor is the client's (blocking), so the
// engine writes only when poll says the write cannot block.
//
// Both calls are raw (rnic/iov.go): neither blocks, and going through the
// scheduler's hooks once per completion cost futex hand-offs of the
// engine's P on a daemon pinned to one CPU.
func notifyChannel(fd int) {
	pfd := unix.PollFd{Fd: int32(fd), Events: unix.POLLOUT}
	n, _, errno := unix.RawSyscall6(unix.SYS_PPOLL, uintptr(unsafe.Pointer(&pfd)), 1, uintptr(unsafe.Pointer(&zeroTimespec)), 0, 0, 0)
	if errno != 0 || n != 1 || pfd.Revents&unix.POLLOUT == 0 {
		return
	}
	one := [8]byte{1} // little-endian 1 (eventfd counters are host-endian; amd64/arm64 are little-endian)
	unix.RawSyscall(unix.SYS_WRITE, uintptr(fd), uintptr(unsafe.Pointer(&one[0])), 8)
}

// zeroTimespec makes ppoll return at once.
var zeroTimespec unix.Timespec

func (e *Engine) overrunCQ(s *Session, c *CQ, why error) {
	c.overrun = true
	c.Ring.Overrun().Store(1)
	e.Count(nil, cCQOverruns, 1)
	detail := "completion queue overrun"
	if why != nil {
		detail = fmt.Sprintf("completion queue corrupt: %v", why)
	}
	s.SendEvent(e, proto.Event{Type: proto.EventCQError, Handle: c.Handle, Detail: detail})
	for _, q := range s.QPs {
		if q.SendCQ == c || q.RecvCQ == c {
			if q.Eng != e {
				q.cqOverran.Store(true) // its engine moves it (rnic/engines.go serveShared)
				continue
			}
			e.ErrorQP(q, "its completion queue overran")
		}
	}
	if c.Ch != nil {
		notifyChannel(c.Ch.FD)
	}
}

// ErrorQP moves q to ERROR because of a local error (a bad work request, a
// corrupt ring, an overrun CQ) and tells the client (EventQPFatal). Posted
// work requests are flushed by the engine's passes.
func (e *Engine) ErrorQP(q *QP, why string) {
	if q.State == proto.QPStateError {
		return
	}
	q.State = proto.QPStateError
	q.ErrWhy = why
	// A connected RC QP logs when its connection ends (rc/log.go); a
	// client can cause these at will: rate-limited (loglimit.go).
	if ok, n := q.Session.Dev.EventLog.Allow(time.Now()); ok && !q.Ops.LogsOwnEnd() {
		q.Session.Dev.Log.Infof("session %d (pid %d): %v QP %d (QPN %d) moved to ERROR: %s; its work requests complete flushed%s",
			q.Session.ID, q.Session.Cred.Pid, q.Type, q.Handle, q.QPN, why, Note(n))
	}
	q.Session.SendEvent(e, proto.Event{Type: proto.EventQPFatal, Handle: q.Handle, Detail: why})
}

// SendEvent queues an asynchronous event for the session's writer; a full
// queue drops it (counted) rather than block the engine.
func (s *Session) SendEvent(e *Engine, ev proto.Event) {
	select {
	case s.events <- ev:
	default:
		e.Count(nil, cEventsDropped, 1)
		s.EventsDropped.Add(1)
	}
}
