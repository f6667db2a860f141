package rnic

import (
	"errors"

	"golang.org/x/sys/unix"
)

// UDP_GRO and the hand-back to a rank that reads without it
// (docs/fastpath.md "UDP_GRO goes off only over an empty queue"). A rank
// whose page lacks proto.FPFlagGRO reads one datagram per call and cannot
// tell a coalesced buffer apart, so UDP_GRO goes off on its socket; but
// the kernel writes the UDP_GRO control message (udp(7)) only while the
// option is on (net/ipv4/udp.c udp_recvmsg), so a buffer coalesced before
// the switch, still queued, would be read after it — by the engine or by
// the rank — as one datagram: the first's headers, the others as its
// payload (a bad CRC; with CRC off, wrong octets delivered). So the switch
// is made only over an empty queue, and not at the hand-over of the page
// (the engine owns the socket then, and datagrams may be queued) but at
// the first hand-back, after the engine has read what it could: UDP_GRO
// off, then a peek; anything queued turns it back on (the engine reads
// it, with its control message) and the socket stays with the engine
// until a later hand-back finds the queue empty. What arrives after a
// switch over an empty queue is segmented at the socket. c/core fpown.c
// iwvi_fp_own_set_gro is the same rule on the rank's side.

// fastpathGROOff turns UDP_GRO off on q's socket if its page asks for it
// and the socket's queue is empty, and reports whether the socket may go
// to the rank.
func (e *Engine) fastpathGROOff(q *QP) bool {
	f := q.FP
	if !f.groOff {
		return true
	}
	// A socket that never had UDP_GRO on holds no coalesced buffer. A
	// kernel that does not say is taken as on.
	on, err := unix.GetsockoptInt(q.FD, unix.SOL_UDP, unix.UDP_GRO)
	if err == nil && on == 0 {
		f.groOff = false
		return true
	}
	if err := unix.SetsockoptInt(q.FD, unix.SOL_UDP, unix.UDP_GRO, 0); err != nil {
		// Not on in the first place (a kernel without UDP_GRO).
		f.groOff = false
		return true
	}
	if queueEmpty(q.FD) {
		f.groOff = false
		return true
	}
	unix.SetsockoptInt(q.FD, unix.SOL_UDP, unix.UDP_GRO, 1)
	e.Count(q, CFastpathGROWaits, 1)
	q.Readable = true // the engine reads what is queued at its next service
	return false
}

// FastpathGROPending reports whether q's socket waits for an empty queue
// before it can go to its rank (fastpathGROOff): a UD QP parked for want
// of a receive does not count the rank's Want as work then (ud/qp.go), for
// only a posted receive lets it read the queue.
func (q *QP) FastpathGROPending() bool { return q.FP != nil && q.FP.groOff }

// queueEmpty reports whether fd's receive queue is empty: a peek of 0
// octets (MSG_TRUNC returns the length of the datagram at the head, and
// takes none). An error other than EAGAIN is not known empty.
func queueEmpty(fd int) bool {
	var b [1]byte
	_, _, err := unix.Recvfrom(fd, b[:0], unix.MSG_PEEK|unix.MSG_DONTWAIT|unix.MSG_TRUNC)
	return errors.Is(err, unix.EAGAIN)
}
