package rc

import (
	"encoding/binary"
	"errors"
	"io"
	"net"
	"net/netip"
	"strconv"
	"sync"
	"time"

	"github.com/iwarpd/iwarpd/mpa"
	"github.com/iwarpd/iwarpd/proto"
	"github.com/iwarpd/iwarpd/verbsd/config"
	"github.com/iwarpd/iwarpd/verbsd/rnic"
	"golang.org/x/sys/unix"
)

// cmListener is a TCP listening socket of a session. One goroutine accepts;
// each accepted connection gets a goroutine that reads the MPA Request. At
// most backlog connections are in negotiation or wait for Accept/Reject at
// a time; beyond that the listener stops accepting (the kernel's backlog
// holds the rest).
type cmListener struct {
	s      *CM
	Handle uint32
	ln     *net.TCPListener
	Addr   netip.AddrPort
	slots  chan struct{}
	done   chan struct{}
	once   sync.Once
}

// cmPending is a valid MPA Request waiting for the client's Accept or
// Reject. It holds a listener slot until then (or until the MPA timeout).
type cmPending struct {
	id          uint32
	l           *cmListener
	conn        *net.TCPConn
	req         mpa.Frame // PrivateData aliases buf
	buf         []byte
	peer, local netip.AddrPort
	timer       *time.Timer
	once        sync.Once
}

// Listen opens a listener for session s on addr ("ip:port", ":port").
func (s *CM) Listen(addr string, backlog int) (*cmListener, error) {
	if err := s.Dev.Cfg.MPA.Validate(); err != nil {
		return nil, rnic.Errf(unix.EINVAL, "listen: the device's MPA policy: %v", err)
	}
	ap, err := s.parseListenAddr(addr)
	if err != nil {
		return nil, err
	}
	if err := s.CheckListenAddr(ap); err != nil { // rnic/bind.go
		return nil, err
	}
	if backlog <= 0 {
		backlog = defaultBacklog
	}
	backlog = min(backlog, maxBacklog)
	if err := s.Dev.Users.Acquire(s.Session, config.ResListeners, 1); err != nil { // rnic/userlimits.go
		return nil, err
	}
	ln, err := net.ListenTCP("tcp", net.TCPAddrFromAddrPort(ap))
	if err != nil {
		s.Dev.Users.Release(s.Session, config.ResListeners, 1)
		switch {
		case errors.Is(err, unix.EADDRINUSE):
			return nil, rnic.Errf(unix.EADDRINUSE, "listen: %s is in use", ap)
		case errors.Is(err, unix.EADDRNOTAVAIL):
			return nil, rnic.Errf(unix.EADDRNOTAVAIL, "listen: %s is not a local address", ap.Addr())
		case errors.Is(err, unix.EACCES):
			return nil, rnic.Errf(unix.EACCES, "listen: %s: permission denied", ap)
		}
		return nil, rnic.Errf(unix.EINVAL, "listen: %s: %v", ap, err)
	}
	l := &cmListener{s: s, ln: ln, Addr: tcpAddr(ln.Addr()), slots: make(chan struct{}, backlog), done: make(chan struct{})}
	cm := &s.cm
	cm.mu.Lock()
	if err := cm.start(s); err != nil {
		cm.mu.Unlock()
		ln.Close()
		s.Dev.Users.Release(s.Session, config.ResListeners, 1)
		return nil, err
	}
	if max := s.Dev.Cfg.Limits.MaxListeners; len(cm.listeners) >= max {
		cm.mu.Unlock()
		ln.Close()
		return nil, rnic.LimitErrf(unix.EMFILE, "max-listeners", "listen: session limit of %d listeners reached (-max-listeners); close one first", max)
	}
	l.Handle = cm.nextID()
	cm.listeners[l.Handle] = l
	cm.mu.Unlock()
	go l.acceptLoop()
	s.Dev.Log.Debugf("session %d: listening on %s (listener %d, backlog %d)", s.ID, l.Addr, l.Handle, backlog)
	return l, nil
}

// parseListenAddr reads "ip:port" or ":port" (the device address).
func (s *CM) parseListenAddr(addr string) (netip.AddrPort, error) {
	bad := rnic.Errf(unix.EINVAL, "listen: address %q: want ip:port or :port", addr)
	if len(addr) > 0 && addr[0] == ':' {
		port, err := strconv.ParseUint(addr[1:], 10, 16)
		if err != nil {
			return netip.AddrPort{}, bad
		}
		return netip.AddrPortFrom(s.Dev.Cfg.Addr, uint16(port)), nil
	}
	ap, err := netip.ParseAddrPort(addr)
	if err != nil {
		return netip.AddrPort{}, bad
	}
	return netip.AddrPortFrom(ap.Addr().Unmap(), ap.Port()), nil
}

// CloseListener closes listener handle and drops its pending requests.
func (s *CM) CloseListener(handle uint32) error {
	cm := &s.cm
	cm.mu.Lock()
	l := cm.listeners[handle]
	if l == nil {
		cm.mu.Unlock()
		return rnic.Errf(unix.EINVAL, "close-listener: no listener %d", handle)
	}
	delete(cm.listeners, handle)
	s.Dev.Users.Release(s.Session, config.ResListeners, 1) // rnic/userlimits.go
	var drop []*cmPending
	for id, p := range cm.pending {
		if p.l == l {
			delete(cm.pending, id)
			drop = append(drop, p)
		}
	}
	cm.mu.Unlock()
	l.close()
	for _, p := range drop {
		p.abandon()
	}
	return nil
}

func (l *cmListener) close() {
	l.once.Do(func() {
		close(l.done)
		l.ln.Close()
	})
}

func (l *cmListener) acceptLoop() {
	for {
		select {
		case l.slots <- struct{}{}:
		case <-l.done:
			return
		}
		c, err := l.ln.AcceptTCP()
		if err != nil {
			<-l.slots
			if errors.Is(err, net.ErrClosed) {
				return
			}
			l.s.Dev.Log.Warnf("session %d: listener %s: accept: %v", l.s.ID, l.Addr, err)
			select { // EMFILE and friends: do not spin
			case <-time.After(50 * time.Millisecond):
			case <-l.done:
				return
			}
			continue
		}
		go l.handshake(c)
	}
}

func (l *cmListener) release() { <-l.slots }

// handshake reads the MPA Request of a new connection and either answers
// an invalid one with the RFC's Reject Reply, or announces a valid one to
// the client as a CMConnectRequest event.
func (l *cmListener) handshake(c *net.TCPConn) {
	s := l.s
	cfg := s.Dev.Cfg.MPA
	deadline := time.Now().Add(cfg.TimeoutOrDefault())
	c.SetReadDeadline(deadline)
	peer, local := tcpAddr(c.RemoteAddr()), tcpAddr(c.LocalAddr())
	buf := make([]byte, mpa.FrameHeaderLen+mpa.MaxPrivateData)
	frame, err := readFrame(c, buf)
	params, reject, err := judgeRequest(responderPolicy(cfg, nil, 0, 0), frame, err)
	if err != nil {
		if reject != nil {
			// RFC 5044 §7.1 / RFC 6581: an unacceptable Request is
			// answered with a Reply whose R bit is set, then closed.
			writeFull(c, reject, deadline)
		}
		if ok, n := s.Dev.EventLog.Allow(time.Now()); ok { // rnic/loglimit.go: a remote host could flood
			s.Dev.Log.Infof("session %d (pid %d): listener %s: connection from %s refused: MPA Request: %v%s",
				s.ID, s.Cred.Pid, l.Addr, peer, err, rnic.Note(n))
		}
		c.Close()
		l.release()
		return
	}
	p := &cmPending{l: l, conn: c, req: frame, buf: buf, peer: peer, local: local}
	cm := &s.cm
	cm.mu.Lock()
	if cm.closed || cm.listeners[l.Handle] != l {
		cm.mu.Unlock()
		p.abandon()
		return
	}
	p.id = cm.nextID()
	cm.pending[p.id] = p
	p.timer = time.AfterFunc(cfg.TimeoutOrDefault(), func() {
		if x := s.cm.take(p.id); x != nil {
			s.Dev.Log.Debugf("session %d: connection request %d from %s expired unanswered", s.ID, p.id, peer)
			x.abandon()
		}
	})
	cm.mu.Unlock()
	ev := proto.CMEvent{Type: proto.CMConnectRequest, Listener: l.Handle, Conn: p.id, Peer: peer.String(),
		Local: local.String(), PrivateData: clonePD(params.PeerPrivateData), IRD: params.PeerIRD, ORD: params.PeerORD,
		MPA: &proto.MPAParams{Revision: frame.Revision, Enhanced: params.Enhanced, CRC: frame.CRC,
			MarkersTx: frame.Markers, PeerToPeer: params.PeerToPeer, PeerIRD: params.PeerIRD, PeerORD: params.PeerORD}}
	cm.post(s, ev)
}

// judgeRequest decides on an MPA Request read by readFrame (readErr is
// readFrame's error). A timeout, EOF or reset gets no answer (reject nil); a
// frame that is no valid Request (bad key, PD_Length > 512, Rev > 2, R set,
// a policy refusal) gets the Reject Reply to send before closing. On success
// params are the initiator's offer (the Reply is built at Accept).
func judgeRequest(policy mpa.Policy, f mpa.Frame, readErr error) (params mpa.Params, reject []byte, err error) {
	if readErr != nil {
		if errors.Is(readErr, mpa.ErrBadKey) || errors.Is(readErr, mpa.ErrPrivateDataTooLong) {
			r := mpa.NewResponder(policy).Reject(nil)
			return mpa.Params{}, r.Append(nil), readErr
		}
		return mpa.Params{}, nil, readErr
	}
	reply, params, err := mpa.NewResponder(policy).HandleRequest(f)
	if err != nil {
		return mpa.Params{}, reply.Append(nil), err
	}
	return params, nil, nil
}

// readFrame reads exactly one MPA Request or Reply (20 + PD_Length octets,
// nothing more) into buf, which has room for the largest.
func readFrame(c io.Reader, buf []byte) (mpa.Frame, error) {
	if _, err := io.ReadFull(c, buf[:mpa.FrameHeaderLen]); err != nil {
		return mpa.Frame{}, err
	}
	f, _, err := mpa.ParseFrame(buf[:mpa.FrameHeaderLen])
	if errors.Is(err, mpa.ErrTruncated) {
		n := mpa.FrameHeaderLen + int(binary.BigEndian.Uint16(buf[18:20])) // ≤ 532: ParseFrame checked
		if _, err := io.ReadFull(c, buf[mpa.FrameHeaderLen:n]); err != nil {
			return mpa.Frame{}, err
		}
		f, _, err = mpa.ParseFrame(buf[:n])
	}
	return f, err
}

func clonePD(b []byte) []byte {
	if len(b) == 0 {
		return nil
	}
	return append([]byte(nil), b...)
}

// take removes pending request id (nil if it is gone).
func (cm *cmSession) take(id uint32) *cmPending {
	cm.mu.Lock()
	defer cm.mu.Unlock()
	p := cm.pending[id]
	if p != nil {
		delete(cm.pending, id)
		if p.timer != nil {
			p.timer.Stop()
		}
	}
	return p
}

// finish releases p's connection slot (once); close also closes the socket
// (not after a hand-off).
func (p *cmPending) finish(closeConn bool) {
	p.once.Do(func() {
		if closeConn {
			p.conn.Close()
		}
		p.l.release()
	})
}

// abandon closes p without an answer (expired, listener or session closed).
func (p *cmPending) abandon() { p.finish(true) }

// Accept answers pending request id with an MPA Reply carrying privateData
// and the IRD/ORD block, and hands the connection to QP handle.
func (s *CM) Accept(req proto.AcceptRequest) (*proto.CMEvent, error) {
	const op = "accept"
	cfg := s.Dev.Cfg.MPA
	if req.IRD > config.MaxIRDORD || req.ORD > config.MaxIRDORD {
		return nil, rnic.Errf(unix.EINVAL, "%s: IRD %d / ORD %d: at most %d", op, req.IRD, req.ORD, config.MaxIRDORD)
	}
	s.cm.mu.Lock()
	p := s.cm.pending[req.Conn]
	s.cm.mu.Unlock()
	if p == nil {
		return nil, rnic.Errf(unix.EINVAL, "%s: no connection request %d (answered, expired or never made)", op, req.Conn)
	}
	policy := responderPolicy(cfg, req.PrivateData, req.IRD, req.ORD)
	if p.req.Revision != 2 || !p.req.Enhanced {
		policy.Revision = 1 // the private data budget of the Reply's revision
	}
	if err := policy.Validate(); err != nil {
		return nil, rnic.Errf(unix.EINVAL, "%s: %v", op, err)
	}
	if err := s.reserveRC(req.QP, op); err != nil {
		return nil, err
	}
	if p = s.cm.take(req.Conn); p == nil {
		s.releaseRC(req.QP)
		return nil, rnic.Errf(unix.EINVAL, "%s: connection request %d expired", op, req.Conn)
	}
	policy.Revision = cfg.Revision
	reply, params, err := mpa.NewResponder(policy).HandleRequest(p.req)
	deadline := time.Now().Add(cfg.TimeoutOrDefault())
	if err != nil { // the device policy already accepted this Request
		writeFull(p.conn, reply.Append(nil), deadline)
		p.abandon()
		s.releaseRC(req.QP)
		return nil, rnic.Errf(unix.EPROTO, "%s: %v", op, err)
	}
	if err := writeFull(p.conn, reply.Append(make([]byte, 0, reply.Len())), deadline); err != nil {
		p.abandon()
		s.releaseRC(req.QP)
		return nil, rnic.Errf(unix.ECONNRESET, "%s: sending the MPA Reply to %s: %v", op, p.peer, err)
	}
	params.PeerPrivateData = clonePD(params.PeerPrivateData)
	a, err := handOff(p.conn, params, false)
	p.finish(false)
	if err != nil {
		s.releaseRC(req.QP)
		return nil, rnic.Errf(unix.EIO, "%s: %v", op, err)
	}
	ev := proto.CMEvent{Type: proto.CMEstablished, QP: req.QP, Conn: req.Conn, Peer: p.peer.String(),
		Local: p.local.String(), PrivateData: params.PeerPrivateData, IRD: params.LocalIRD, ORD: params.LocalORD,
		MPA: mpaParams(params)}
	if err := s.attachConn(req.QP, a, ev, nil); err != nil {
		return nil, err
	}
	return &ev, nil
}

// Reject answers pending request id with an MPA Reply with R=1 carrying
// privateData, then closes the connection.
func (s *CM) Reject(req proto.RejectRequest) error {
	if len(req.PrivateData) > mpa.MaxPrivateData {
		return rnic.Errf(unix.EINVAL, "reject: %d octets of private data, at most %d", len(req.PrivateData), mpa.MaxPrivateData)
	}
	p := s.cm.take(req.Conn)
	if p == nil {
		return rnic.Errf(unix.EINVAL, "reject: no connection request %d (answered, expired or never made)", req.Conn)
	}
	defer p.abandon()
	r := mpa.NewResponder(responderPolicy(s.Dev.Cfg.MPA, nil, 0, 0))
	r.HandleRequest(p.req) // sets the Reply's revision from the Request
	f := r.Reject(req.PrivateData)
	if err := writeFull(p.conn, f.Append(nil), time.Now().Add(s.Dev.Cfg.MPA.TimeoutOrDefault())); err != nil {
		return rnic.Errf(unix.ECONNRESET, "reject: sending the MPA Reply to %s: %v", p.peer, err)
	}
	return nil
}
