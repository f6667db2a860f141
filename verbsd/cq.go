package verbsd

import (
	"fmt"
	"unsafe"

	"github.com/iwarpd/iwarpd/proto"
	"golang.org/x/sys/unix"
)

// postCQE writes one completion into c and publishes it, then signals the
// completion channel if the CQ is armed for it (ArmNext, or ArmSolicited
// and the completion is a solicited receive or an error). A full CQ is an
// overrun: the CQ is marked (Overrun word, EventCQError), every QP of the
// session using it goes to ERROR, and its completions are dropped from then
// on. It never blocks.
func (e *Engine) postCQE(s *Session, c *cq, cqe *proto.CQE) {
	if e.shared { // engines.go: QPs of other engines may complete into c
		c.mu.Lock()
		defer c.mu.Unlock()
	}
	if c.overrun {
		return
	}
	slot, err := c.prod.Next()
	if err != nil || slot == nil {
		e.overrunCQ(s, c, err)
		return
	}
	cqe.Put(slot)
	c.prod.Publish()
	e.completed = true
	arm := c.ring.Arm()
	v := arm.Load()
	solicited := cqe.Flags&proto.WCFlagSolicited != 0 || cqe.Status != proto.WCSuccess
	if (v == proto.ArmNext || (v == proto.ArmSolicited && solicited)) && arm.CompareAndSwap(v, proto.ArmNone) && c.ch != nil {
		notifyChannel(c.ch.fd)
	}
}

// notifyChannel adds 1 to a client's completion-channel eventfd without ever
// blocking the engine: the descriptor is the client's (blocking), so the
// engine writes only when poll says the write cannot block.
//
// Both calls are raw (iov.go): neither blocks, and going through the
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

func (e *Engine) overrunCQ(s *Session, c *cq, why error) {
	c.overrun = true
	c.ring.Overrun().Store(1)
	e.count(nil, cCQOverruns, 1)
	detail := "completion queue overrun"
	if why != nil {
		detail = fmt.Sprintf("completion queue corrupt: %v", why)
	}
	s.sendEvent(e, proto.Event{Type: proto.EventCQError, Handle: c.handle, Detail: detail})
	for _, q := range s.qps {
		if q.sendCQ == c || q.recvCQ == c {
			if q.eng != e {
				q.cqOverran.Store(true) // its engine moves it (engines.go serveShared)
				continue
			}
			e.errorQP(q, "its completion queue overran")
		}
	}
	if c.ch != nil {
		notifyChannel(c.ch.fd)
	}
}

// errorQP moves q to ERROR because of a local error (a bad work request, a
// corrupt ring, an overrun CQ) and tells the client (EventQPFatal). Posted
// work requests are flushed by the engine's passes.
func (e *Engine) errorQP(q *QP, why string) {
	if q.state == proto.QPStateError {
		return
	}
	q.state = proto.QPStateError
	q.errWhy = why
	if !q.ops.logsOwnEnd() { // a connected RC QP logs when its connection ends (rc_log.go)
		q.s.dev.log.Infof("session %d (pid %d): %v QP %d (QPN %d) moved to ERROR: %s; its work requests complete flushed",
			q.s.id, q.s.cred.Pid, q.typ, q.handle, q.qpn, why)
	}
	q.s.sendEvent(e, proto.Event{Type: proto.EventQPFatal, Handle: q.handle, Detail: why})
}

// sendEvent queues an asynchronous event for the session's writer; a full
// queue drops it (counted) rather than block the engine.
func (s *Session) sendEvent(e *Engine, ev proto.Event) {
	select {
	case s.events <- ev:
	default:
		e.count(nil, cEventsDropped, 1)
		s.eventsDropped.Add(1)
	}
}
