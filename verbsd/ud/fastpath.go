package ud

import (
	"time"

	"github.com/iwarpd/iwarpd/proto"
	"github.com/iwarpd/iwarpd/verbsd/rnic"
	"golang.org/x/sys/unix"
)

// The fast path of a UD QP (rnic/fastpath.go, docs/fastpath.md): while its
// rank owns the QP's own socket the engine keeps that socket out of its
// epoll interest and does not read it (it still sends on it, MSG_DONTWAIT);
// multicast groups' sockets stay the engine's.

// The posted receives follow the socket (docs/fastpath.md "Posted
// receives"): while the rank owns the socket it places the Sends it reads
// into its QP's own receive queue and consumes the entries itself (it
// stores the ring's consumer index); the engine does not consume that
// queue then — it reads neither the QP's socket nor its multicast groups'
// (which would take receives too), and flushes an ERROR QP's work only
// once it has the socket back. When it takes the socket over it adopts
// the ring's consumer index (checked: within [its own, the producer's];
// else the QP fails), and it publishes its own before it gives the
// socket back. So each receive is consumed by exactly one side, in
// posting order.

// fastpathBegin follows q's fast-path page at the start of its service:
// once the engine has taken the socket over (and seen the rank's Busy
// clear), it adopts the receive queue's consumer index and the socket
// gets its interest back and is read at once.
func (e *Engine) fastpathBegin(q *QP, now time.Time) {
	if _, started := e.FastpathBegin(q.QP, now); started {
		if q.RQ != nil && q.FP != nil {
			if err := q.RQ.Adopt(); err != nil {
				e.count(q, rnic.CWRErrors, 1)
				e.errorQP(q, "the receive queue's consumer index the rank left at the take-over of its socket is impossible ("+
					err.Error()+"): destroy the QP and create another (docs/fastpath.md)")
			}
		}
		q.Readable = true
		e.setOwnInterest(q)
	}
}

// fastpathEnd gives q's socket back to its rank at the end of the service
// when the rank asked for it: the completions of what the engine read are
// published, and nothing read waits in the engine for a receive
// (ud/backlog.go held datagrams: the rank would otherwise overtake them).
// Not to a QP in ERROR (its work is flushed by the engine) nor to one
// attached to multicast groups (the engine reads their sockets, into the
// same receive queue).
func (e *Engine) fastpathEnd(q *QP, now time.Time) bool {
	give := !q.backlog.waiting() && q.State != proto.QPStateError && len(q.mcast.socks) == 0
	if give && q.RQ != nil && q.FastpathWanted() {
		q.RQ.Release() // the rank reads the consumer index from here on
	}
	if !e.FastpathEnd(q.QP, now, give) {
		return false
	}
	q.Readable = false
	e.setOwnInterest(q)
	return true
}

// ownEvents is the epoll interest of q's own socket for events, the
// interest its engine would give it: none while the rank reads it.
func (q *QP) ownEvents(events uint32) uint32 {
	if !q.DaemonReads() {
		return 0
	}
	return events
}

// SetOwnInterest gives q's own socket the interest it has now (an RD
// QP's hand-over, rd/fastpath.go).
func (e *Engine) SetOwnInterest(q *QP) { e.setOwnInterest(q) }

// setOwnInterest gives q's own socket the interest it has now (parked,
// the rank's or the engine's).
func (e *Engine) setOwnInterest(q *QP) {
	ev := unix.EpollEvent{Events: q.ownEvents(q.interest()), Fd: int32(q.FD)}
	unix.EpollCtl(e.EpFD, unix.EPOLL_CTL_MOD, q.FD, &ev)
}

// SetFastpath installs f on QP q (fastpath-page; on q's engine). Unless
// the page says the rank reads with UDP_GRO (proto.FPFlagGRO), UDP_GRO
// goes off on its socket before the socket first goes to the rank: such a
// rank reads one datagram per call and leaves to the engine what it does
// not serve, and a coalesced buffer would be one it cannot tell apart. Not
// here but at the first hand-back, over an empty queue (rnic
// fastpath_gro.go): a buffer coalesced before the switch would be read as
// one datagram, by the engine too. The engine reads either kind. A rank
// that sets the flag leaves coalesced buffers to the engine, which then
// takes a multi-datagram message in as one buffer per GSO send (a third
// of the engine's receive calls and none of the kernel's segmentation of
// each buffer: docs/fastpath.md "UDP_GRO stays on for a rank that reads
// it").
func SetFastpath(q *rnic.QP, f *rnic.Fastpath) {
	q.SetFastpath(f)
}
