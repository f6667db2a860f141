package ud

import (
	"net/netip"
	"time"
	"unsafe"

	"github.com/iwarpd/iwarpd/ddp"
	"github.com/iwarpd/iwarpd/llp/dgram"
	"github.com/iwarpd/iwarpd/proto"
	"github.com/iwarpd/iwarpd/rdmap"
	"github.com/iwarpd/iwarpd/verbsd/rnic"
	"golang.org/x/sys/unix"
)

// The UD receive backlog (docs/iwarpd.md "UD receive backlog").
//
// A UD QP's socket receive buffer is its receive backlog, as a NIC's
// receive ring is an adapter's: the engine reads a UD QP's sockets (its
// own and its multicast groups') while the QP has posted receives (of its
// RQ or its SRQ), at most one datagram more per recvmmsg than there are
// receives (so that a short read still says the socket is drained; the
// one beyond is held when it needs a receive). A datagram that finds no
// posted receive is not read, so it is not dropped: it waits in the
// kernel until the client posts one, while the socket buffer
// (Config.SocketBuffer) has room. Only a full socket buffer drops, as a
// full NIC ring does; the kernel counts those (drop_socket_full, read
// with SO_MEMINFO when the daemon is inspected).
//
// Parking. When a QP's socket is readable and it has no receive, the
// engine takes the socket's EPOLLIN interest away (EPOLL_CTL_MOD with no
// events: epoll is level-triggered here, a readable socket nobody reads
// would wake the engine in every epoll_wait and keep it spinning) and the
// QP is parked. Parking is lazy: a QP whose RQ runs empty while nothing
// waits keeps its interest, so a ping-pong that reposts before the next
// message arrives pays no epoll_ctl. A parked QP has work (hasWork) as
// soon as a receive is posted, or when it no longer delivers (ERROR,
// RESET: the datagrams waiting are then read and dropped as not ready, as
// before): the probe or the pre-sleep re-scan finds it (a client posting
// to a sleeping engine rings the doorbell), and Service unparks it
// (EPOLLIN again) and reads at once.
//
// What needs a receive. Only a datagram that may consume a receive waits
// for one: a Send-family segment or a Write-Record segment naming the
// QP's Q_Key (needsRecv; the CRC is not looked at, so a corrupt one waits
// and is dropped when judged). Error messages (Terminate on QN 2: a
// sender's QP, which often posts no receive, must see them), datagrams
// naming another Q_Key and malformed ones consume none: when no receive is
// posted, the engine peeks at the datagram at the head of the socket
// (MSG_PEEK, its first octets) and reads and judges it if it needs none;
// it parks when the head needs one. Arrival order stays: whatever comes
// behind a datagram waiting for a receive waits with it.
//
// Held datagrams. With UDP_GRO one buffer the kernel hands over may carry
// several datagrams of one flow, so a read bounded by the receives can
// still bring more messages than receives. Before judging a datagram the
// engine checks that a receive is posted; the rest of the batch (this
// datagram on) is copied into the QP's held list (held, at most one
// recvmmsg batch: the sockets are not read again until it is empty) and
// judged, in order, before the sockets when receives are posted.
//
// drop_no_recv now counts only messages whose head receive failed when
// they were delivered (a malformed RQE: the receive completes in error and
// the QP goes to ERROR); before the backlog it counted every datagram that
// arrived while the RQ was empty.

// udBacklog is a UD QP's receive flow control (engine-owned).
type udBacklog struct {
	parked bool        // EPOLLIN interest taken away: no receive was posted
	held   []byte      // datagrams read and not yet judged, back to back
	ents   []heldDgram // where they are in held, in arrival order
	next   int         // the first of ents not yet judged
}

// heldDgram is one held datagram: n octets at off of held.
type heldDgram struct {
	off, n int
	src    netip.AddrPort
	mcast  bool
}

// heldKeep is the held buffer's capacity kept once it empties; a larger
// one (a whole GRO batch was held) is released.
const heldKeep = 64 << 10

// waiting reports whether q has held datagrams.
func (b *udBacklog) waiting() bool { return b.next < len(b.ents) }

// postedRecvs returns how many receives q has posted (RQ or SRQ); a
// corrupt ring counts as one, so that the look-ahead finds and reports it.
func (q *QP) postedRecvs() int {
	n, err := q.RecvRing().Available()
	if err != nil {
		return 1
	}
	return int(n)
}

// delivers reports whether q's state delivers datagrams (RTR, RTS).
func (q *QP) delivers() bool {
	return q.State == proto.QPStateRTR || q.State == proto.QPStateRTS
}

// backlogWork reports whether q's receive backlog can move now: it is
// parked or holds datagrams, and a receive is posted (or q no longer
// delivers, so what waits is dropped).
func (q *QP) backlogWork() bool {
	if !q.backlog.parked && !q.backlog.waiting() {
		return false
	}
	return !q.delivers() || q.postedRecvs() > 0
}

// park takes EPOLLIN interest away from q's sockets: no receive is posted
// for what they hold.
func (e *Engine) park(q *QP) {
	if q.backlog.parked {
		return
	}
	q.backlog.parked = true
	q.Readable = false
	e.count(q, rnic.CRecvParked, 1)
	e.setInterest(q, 0)
}

// unpark gives q's sockets their EPOLLIN interest back and marks q
// readable: it was parked with datagrams waiting.
func (e *Engine) unpark(q *QP) {
	if !q.backlog.parked {
		return
	}
	q.backlog.parked = false
	q.Readable = true
	e.setInterest(q, unix.EPOLLIN)
}

// setInterest sets the epoll events of q's own socket and its multicast
// groups' sockets. EPOLL_CTL_MOD on a descriptor of the set cannot fail
// but for ENOMEM; then the interest stays as it was: a socket left
// watched is read (and re-parked) on the next pass, one left unwatched is
// read when q is unparked.
func (e *Engine) setInterest(q *QP, events uint32) {
	ev := unix.EpollEvent{Events: q.ownEvents(events), Fd: int32(q.FD)} // ud/fastpath.go: none while the rank reads it
	unix.EpollCtl(e.EpFD, unix.EPOLL_CTL_MOD, q.FD, &ev)
	for _, m := range q.mcast.socks {
		ev = unix.EpollEvent{Events: events, Fd: int32(m.fd)}
		unix.EpollCtl(e.EpFD, unix.EPOLL_CTL_MOD, m.fd, &ev)
	}
}

// interest is the epoll events a new socket of q (a multicast group
// attached) is added with.
func (q *QP) interest() uint32 {
	if q.backlog.parked {
		return 0
	}
	return rnic.SockInterest(q.QP)
}

// resumeBacklog judges q's held datagrams while receives are posted and
// unparks q once nothing is held and a receive is posted (or q no longer
// delivers). It reports whether it did any work.
func (e *Engine) resumeBacklog(q *QP, now time.Time) bool {
	work := false
	b := &q.backlog
	if b.waiting() {
		work = e.judgeHeld(q, now)
	}
	if b.parked && !b.waiting() && (!q.delivers() || q.postedRecvs() > 0) {
		e.unpark(q)
		work = true
	}
	return work
}

// judgeHeld judges held datagrams in order, at most PollBatch, up to the
// first that needs a receive when none is posted (q no longer
// delivering: each is dropped as not ready).
func (e *Engine) judgeHeld(q *QP, now time.Time) bool {
	b := &q.backlog
	rb := e.Rb
	work := false
	for k := 0; k < e.Cfg.PollBatch && b.waiting(); k++ {
		deliver := q.delivers()
		rb.Nrqe, rb.Used = 0, 0
		h := b.ents[b.next]
		if deliver && q.postedRecvs() == 0 && q.needsRecv(b.held[h.off:h.off+h.n]) {
			break
		}
		b.next++
		work = true
		// Slot 0 of the batch scratch: the sockets are not read while
		// datagrams are held, so it is free.
		s := &rb.Slots[0]
		s.View = append(s.View[:0], s.Hdr[:], s.Tail)
		rnic.Scatter(s.View, b.held[h.off:h.off+h.n])
		s.N, s.Trunc, s.Gso, s.Src = h.n, false, 0, h.src
		rb.mcast = h.mcast
		q.rwr.Valid = false
		e.count(q, rnic.CDatagramsIn, 1)
		if !deliver {
			e.count(q, rnic.CDropNotReady, 1)
			continue
		}
		e.count(q, rnic.CRecvHeldJudged, 1)
		e.datagram(q, 0, 0, h.n, now)
	}
	if !b.waiting() {
		b.reset()
	}
	return work
}

// needHold reports whether the datagram of n octets at off of slot i,
// about to be judged, must be held: q delivers, no receive is posted, and
// it needs one.
func (e *Engine) needHold(q *QP, i, off, n int) bool {
	if !q.delivers() || q.postedRecvs() > 0 {
		return false
	}
	var head [slotHeaderLen]byte
	k := rnic.CopyRange(head[:min(n, slotHeaderLen)], e.Rb.Slots[i].View, off)
	return q.needsRecv(head[:k])
}

// needsRecv reports whether a datagram whose first octets are b may
// consume a receive: it names q's Q_Key and is a Send-family segment
// (untagged, QN 0) or a Write-Record segment. A datagram too short for its
// headers, of another Q_Key, an error message or of another opcode is
// dropped or handled without one.
func (q *QP) needsRecv(b []byte) bool {
	if len(b) < dgram.KeyHeaderLen+ddp.TaggedHeaderLen {
		return false
	}
	if keys, _ := dgram.ParseKeys(b[:dgram.KeyHeaderLen]); keys.QKey != q.Qkey {
		return false
	}
	b = b[dgram.KeyHeaderLen:]
	op := rdmap.Control(b[1]).Opcode()
	if b[0]&0x80 != 0 { // tagged
		return op.IsWriteRecord()
	}
	if len(b) < ddp.UntaggedHeaderLen {
		return false
	}
	h, _, err := ddp.Parse(b)
	if err != nil || h.QN != rdmap.QNSend {
		return false
	}
	return op == rdmap.OpSend || op == rdmap.OpSendSE || op == rdmap.OpImmediateData || op == rdmap.OpImmediateDataSE
}

// headNeedsRecv peeks at the datagram at the head of socket fd (its first
// octets, MSG_PEEK: it stays queued) and reports whether it needs a
// receive; empty says the socket holds none.
func (e *Engine) headNeedsRecv(q *QP, fd int) (need, empty bool) {
	head := &e.Rb.peek
	// recvfrom(2) without a source address: it never blocks (MSG_DONTWAIT)
	// and, raw, allocates nothing (rnic/iov.go).
	n, _, errno := unix.RawSyscall6(unix.SYS_RECVFROM, uintptr(fd), uintptr(unsafe.Pointer(&head[0])), uintptr(len(head)),
		unix.MSG_PEEK|unix.MSG_DONTWAIT, 0, 0)
	if errno != 0 {
		// EAGAIN: nothing queued. Another error (a pending ICMP error on
		// the socket) is taken by the read that follows, as before.
		return false, errno == unix.EAGAIN
	}
	return q.needsRecv(head[:min(int(n), len(head))]), false
}

// hold copies n octets at off of slot i's view into q's held list.
func (e *Engine) hold(q *QP, i, off, n int) {
	s := &e.Rb.Slots[i]
	b := &q.backlog
	at := len(b.held)
	b.held = append(b.held, make([]byte, n)...)
	rnic.CopyRange(b.held[at:], s.View, off)
	b.ents = append(b.ents, heldDgram{off: at, n: n, src: s.Src, mcast: e.Rb.mcast})
	e.count(q, rnic.CRecvHeld, 1)
	e.park(q) // the sockets wait until the held datagrams are judged
}

// reset empties the held list (keeping a small buffer for the next time).
func (b *udBacklog) reset() {
	if cap(b.held) > heldKeep {
		b.held = nil
	}
	b.held = b.held[:0]
	clear(b.ents)
	b.ents = b.ents[:0]
	b.next = 0
}

// socketDrops returns the datagrams the kernel dropped on q's sockets
// (SO_MEMINFO, SK_MEMINFO_DROPS: a full receive buffer, mostly), for
// Inspect.
func (q *QP) socketDrops() int64 {
	n := sockDrops(q.FD)
	for _, m := range q.mcast.socks {
		n += sockDrops(m.fd)
	}
	return n
}

// skMeminfoDrops is the index of the drop count in SO_MEMINFO's array
// (linux/sock_diag.h SK_MEMINFO_DROPS).
const (
	skMeminfoDrops = 8
	skMeminfoVars  = 9
)

func sockDrops(fd int) int64 {
	if fd < 0 {
		return 0
	}
	var mem [skMeminfoVars]uint32
	l := uint32(unsafe.Sizeof(mem))
	_, _, errno := unix.Syscall6(unix.SYS_GETSOCKOPT, uintptr(fd), unix.SOL_SOCKET, unix.SO_MEMINFO,
		uintptr(unsafe.Pointer(&mem[0])), uintptr(unsafe.Pointer(&l)), 0)
	if errno != 0 || l < (skMeminfoDrops+1)*4 {
		return 0
	}
	return int64(mem[skMeminfoDrops])
}
