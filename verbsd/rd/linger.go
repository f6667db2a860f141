package rd

import (
	"encoding/binary"
	"errors"
	"net/netip"
	"time"

	"github.com/iwarpd/iwarpd/internal/crc32c"
	"github.com/iwarpd/iwarpd/llp/dgram"
	"github.com/iwarpd/iwarpd/llp/rd"
	"github.com/iwarpd/iwarpd/verbsd/rnic"
	"github.com/iwarpd/iwarpd/verbsd/ud"
	"golang.org/x/sys/unix"
)

// RD linger (docs/rd.md "Destroying a QP"): a destroyed RD QP sends the
// acknowledgements it owes once (closeAcks); over a lossy path that ACK
// can be lost, and a QP that is gone cannot answer the retransmission, so
// its peer would complete a message that was delivered with
// WCRetryExcErr. As TCP's TIME-WAIT (RFC 9293 §3.6, §3.10.7.4), the engine keeps
// the destroyed QP's socket — its port — for -rd-linger with an
// rd.Linger: the sequence state of the peers it received from recently,
// nothing of the application. It acknowledges again retransmissions of
// what was delivered; everything else is dropped as at a closed port.
//
// The port stays bound while it lingers: a new QP taking a port from the
// range skips it. A new QP that needs it — it asks for that port, or every
// other port of -rd-ports is in use — takes it over (BindRD): the linger
// ends, and the new life answers the old one's peers with RESET as it
// would have without linger ("Peer restarted").

// lingerMaxPeers bounds the peers all lingering ports of the device
// remember (rd.LingerPeerBytes plus a map entry each: a few MiB at most);
// a QP destroyed when the budget is spent lingers with fewer peers or not
// at all (rd_linger_peers_dropped).
const lingerMaxPeers = 1 << 16

// linger is one lingering port.
type linger struct {
	fd       int
	local    netip.AddrPort
	qkey     uint32 // the destroyed QP's Q_Key: datagrams naming another are dropped
	noCRC    bool
	client   bool                      // the socket is the client's (rnic/qpsock.go): an error of it ends the linger
	keys     map[netip.AddrPort]uint32 // the remembered peers' Q_Keys (rd/keys.go)
	l        *rd.Linger
	until    time.Time
	readable bool
}

// lingers is the engine's table of lingering ports and their counters.
type lingers struct {
	byFD     map[int32]*linger
	peers    int       // peers remembered by all of them (lingerMaxPeers)
	next     time.Time // earliest until
	readable bool      // some linger is readable
	acts     []rd.Action
	buf      []byte // one received datagram
	scratch  []byte // headers and CRCs of one batch of replies
	// Counters (Inspect): lingers started, ended by a new QP taking the
	// port, ACKs sent, peers not remembered for lack of budget.
	started, takenOver, acks, peersDropped int64
}

// close is the RD part of RemoveQP, after q left the polling set and
// before its socket closes: the ACKs it owes leave, its reorder store is
// emptied, and its socket lingers (q.fd = -1 then: CloseQP leaves it).
func (e *Engine) close(q *QP, now time.Time) {
	e.fpClose(q, now)   // rd/fastpath.go: the rank's halves first
	e.closeAcks(q, now) // rd/state.go
	q.Rd.dropHeld()     // rd/recv.go: out of the device's reorder store
	e.lingerStart(q, now)
}

// lingerStart makes q's socket linger, if any peer needs it.
func (e *Engine) lingerStart(q *QP, now time.Time) {
	r := q.Rd
	d := r.cfg.RdLingerTime()
	if d <= 0 || q.FD < 0 || e.Quit || q.SockDead {
		return
	}
	ls := &e.linger
	budget := lingerMaxPeers - ls.peers
	want := r.ep.Linger(now, d, 0)
	if want == nil {
		return
	}
	l := want
	if want.Peers() > budget {
		ls.peersDropped += int64(want.Peers() - max(budget, 0))
		if budget <= 0 {
			return
		}
		l = r.ep.Linger(now, d, budget)
	}
	if err := unix.EpollCtl(e.EpFD, unix.EPOLL_CTL_ADD, q.FD, &unix.EpollEvent{Events: rnic.SockInterest(q.QP.QP), Fd: int32(q.FD)}); err != nil {
		return // the socket closes as without linger
	}
	g := &linger{fd: q.FD, local: q.Local, qkey: q.Qkey, noCRC: q.NoCRC, client: q.ClientSock, keys: map[netip.AddrPort]uint32{}, l: l, until: now.Add(d)}
	for a, k := range r.keys {
		if l.Has(a) {
			g.keys[a] = k
		}
	}
	if ls.byFD == nil {
		ls.byFD = map[int32]*linger{}
	}
	if len(ls.byFD) == 0 || g.until.Before(ls.next) {
		ls.next = g.until
	}
	ls.byFD[int32(q.FD)] = g
	ls.peers += l.Peers()
	ls.started++
	q.FD = -1 // the linger owns the socket now
}

// lingerEvent marks the lingering port of descriptor fd readable
// (pollFDs); false if fd is no lingering port's. A client-made socket
// that reports an error or a hang-up (the client shut it down) ends its
// linger: level-triggered, it would otherwise wake every pass.
func (e *Engine) lingerEvent(fd int32, events uint32) bool {
	g := e.linger.byFD[fd]
	if g == nil {
		return false
	}
	if g.client && events&(unix.EPOLLERR|unix.EPOLLHUP|unix.EPOLLRDHUP) != 0 {
		e.lingerEnd(g)
		return true
	}
	g.readable = true
	e.linger.readable = true
	return true
}

// lingerDeadline is when the next lingering port ends (sleepTimeout).
func (e *Engine) lingerDeadline() (time.Time, bool) {
	return e.linger.next, len(e.linger.byFD) > 0
}

// lingerService answers what the readable lingering ports received and
// ends those whose time is up. It reports whether it read anything.
func (e *Engine) lingerService(now time.Time) bool {
	ls := &e.linger
	if len(ls.byFD) == 0 {
		return false
	}
	work := false
	if ls.readable {
		ls.readable = false
		for _, g := range ls.byFD {
			if g.readable {
				work = e.lingerReceive(g) || work
				ls.readable = ls.readable || g.readable
			}
		}
	}
	if !now.Before(ls.next) {
		var next time.Time
		for _, g := range ls.byFD {
			if !now.Before(g.until) {
				e.lingerEnd(g)
			} else if next.IsZero() || g.until.Before(next) {
				next = g.until
			}
		}
		ls.next = next
	}
	return work
}

// lingerEnd closes a lingering port.
func (e *Engine) lingerEnd(g *linger) {
	ls := &e.linger
	unix.EpollCtl(e.EpFD, unix.EPOLL_CTL_DEL, g.fd, nil)
	unix.Close(g.fd)
	delete(ls.byFD, int32(g.fd))
	ls.peers -= g.l.Peers()
}

// lingerRelease ends the linger holding port (0: the one ending first),
// for a new QP that needs the port (BindRD). It reports whether one ended.
func (e *Engine) lingerRelease(port uint16) bool {
	var victim *linger
	for _, g := range e.linger.byFD {
		if (port != 0 && g.local.Port() == port) || (port == 0 && (victim == nil || g.until.Before(victim.until))) {
			victim = g
		}
	}
	if victim == nil {
		return false
	}
	e.lingerEnd(victim)
	e.linger.takenOver++
	return true
}

// lingerCloseAll closes every lingering port (the engine stops).
func (e *Engine) lingerCloseAll() {
	for _, g := range e.linger.byFD {
		e.lingerEnd(g)
	}
}

// lingerReceive reads g's socket (one recvmmsg: at most recvSlots
// buffers per pass) and sends the replies of its rd.Linger.
func (e *Engine) lingerReceive(g *linger) bool {
	ls := &e.linger
	if ls.buf == nil {
		ls.buf = make([]byte, 64<<10)
		ls.scratch = make([]byte, maxBatch*scratchStride)
	}
	rb := e.Rb
	acts := ls.acts[:0]
	got, err := ud.SysRecvmmsg(g.fd, rb.Prepare(ud.RecvSlots))
	if err != nil {
		if errors.Is(err, unix.EAGAIN) {
			g.readable = false
		} else if g.client && !errors.Is(err, unix.EINTR) {
			e.lingerEnd(g) // the client broke its socket: the linger ends, never the engine
		}
		return false
	}
	e.count(nil, rnic.CRecvCalls, 1)
	rb.Received(got)
	for src, b := range e.datagrams(nil, got, ls.buf) {
		if k, err := dgram.ParseKeys(b); err != nil || k.QKey != g.qkey {
			e.count(nil, rnic.CDropQKey, 1)
			continue
		}
		d, err := dgram.ParseRD(b, !g.noCRC)
		if err != nil {
			if errors.Is(err, dgram.ErrBadCRC) {
				e.count(nil, rnic.CDropCRC, 1)
			}
			continue
		}
		acts = g.l.Receive(src, d.RD, acts) // one reply at most per datagram
	}
	if got < ud.RecvSlots {
		g.readable = false
	}
	e.lingerSend(g, acts)
	ls.acts = acts[:0]
	return true
}

// lingerSend sends the replies acts from g's socket, in order (best
// effort: one lost is answered again when its peer retransmits).
func (e *Engine) lingerSend(g *linger, acts []rd.Action) {
	ls := &e.linger
	const dlen = dgram.KeyHeaderLen + dgram.RDHeaderLen + crc32c.Size
	for len(acts) > 0 {
		e.Sb.Reset(false)
		n := 0
		for ; n < len(acts) && n < maxBatch && e.Sb.Fits(acts[n].Peer, dlen, 2, ud.MaxSendMsgs); n++ {
			a := &acts[n]
			sc := ls.scratch[n*scratchStride : (n+1)*scratchStride : (n+1)*scratchStride]
			hdr := dgram.Keys{QKey: g.keys[a.Peer], SrcQKey: g.qkey}.Append(sc[:0])
			hdr = a.Header.Append(hdr)
			var c uint32
			if !g.noCRC {
				c = crc32c.Update(0, hdr)
			}
			trailer := sc[len(hdr) : len(hdr)+crc32c.Size]
			binary.LittleEndian.PutUint32(trailer, c)
			e.Sb.Push(a.Peer, hdr, nil, trailer, ud.DgramRef{})
			ls.acks++
		}
		acts = acts[n:]
		msgs := e.Sb.Finish()
		sent, err := e.Sendmmsg(g.fd, msgs)
		e.count(nil, rnic.CSendCalls, 1)
		e.count(nil, rnic.CDatagramsOut, int64(max(sent, 0)))
		if err != nil || sent < len(msgs) {
			e.count(nil, rnic.CSendErrors, 1)
			if g.client && rnic.SockBroken(err) {
				e.lingerEnd(g) // the client broke its socket: the linger ends
			}
			return // the socket's buffer is full: the rest are lost
		}
	}
}

// lingerInspect adds the lingering ports' counters to m (the daemon's):
// rd_lingering (ports lingering now), rd_lingering_peers (peers they
// remember), rd_lingers (started), rd_linger_taken_over, rd_linger_acks,
// rd_linger_peers_dropped.
func (e *Engine) lingerInspect(m map[string]int64) {
	ls := &e.linger
	m["rd_lingering"] += int64(len(ls.byFD))
	m["rd_lingering_peers"] += int64(ls.peers)
	m["rd_lingers"] += ls.started
	m["rd_linger_taken_over"] += ls.takenOver
	m["rd_linger_acks"] += ls.acks
	m["rd_linger_peers_dropped"] += ls.peersDropped
}

// BindRD binds the socket of a new RD QP (BindDgram over -rd-ports). When
// the port it asks for, or every port of the range, is in use and a
// lingering port is among them, that linger ends and the bind is tried
// again: a new QP is never refused a port for a linger.
func BindRD(s *rnic.Session, port uint16) (int, netip.AddrPort, error) {
	fd, ap, err := ud.BindDgram(s.Dev, port, s.Dev.Cfg.RDPorts, s.PrivBind, s.ID)
	if !errors.Is(err, unix.EADDRINUSE) {
		return fd, ap, err
	}
	// Control commands run with every other engine parked (rnic/engines.go),
	// so engine 0 may end a linger any engine holds.
	released := false
	release := func() error {
		for _, e := range s.Dev.Engs {
			if released = engOf(e).lingerRelease(port); released {
				break
			}
		}
		return nil
	}
	if s.Eng.Do(release) != nil || !released {
		return fd, ap, err
	}
	return ud.BindDgram(s.Dev, port, s.Dev.Cfg.RDPorts, s.PrivBind, s.ID)
}
