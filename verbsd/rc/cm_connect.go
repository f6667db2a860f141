package rc

import (
	"context"
	"errors"
	"io"
	"net"
	"net/netip"
	"os"
	"syscall"
	"time"

	"github.com/iwarpd/iwarpd/iwerr"
	"github.com/iwarpd/iwarpd/mpa"
	"github.com/iwarpd/iwarpd/proto"
	"github.com/iwarpd/iwarpd/verbsd/config"
	"github.com/iwarpd/iwarpd/verbsd/rnic"
	"golang.org/x/sys/unix"
)

// cmActive is a Connect in progress (the initiator side).
type cmActive struct {
	qp        uint32
	localPort uint16 // ConnectRequest.LocalPort
	ctx       context.Context
	cancel    context.CancelFunc
}

// Connect validates a Connect request, takes the QP and starts the
// initiator goroutine. The outcome is a CM event.
func (s *CM) Connect(req proto.ConnectRequest) error {
	const op = "connect"
	cfg := s.Dev.Cfg.MPA
	o := req.MPA
	switch {
	case cfg.Validate() != nil:
		return rnic.Errf(unix.EINVAL, "%s: the device's MPA policy: %v", op, cfg.Validate())
	case req.IRD > config.MaxIRDORD || req.ORD > config.MaxIRDORD:
		return rnic.Errf(unix.EINVAL, "%s: IRD %d / ORD %d: at most %d", op, req.IRD, req.ORD, config.MaxIRDORD)
	case o.Revision > 2:
		return rnic.Errf(unix.EINVAL, "%s: MPA revision %d: want 1 or 2", op, o.Revision)
	case o.CRC > proto.MPACRCOff || o.Markers > proto.ToggleOff || o.PeerToPeer > proto.ToggleOff:
		return rnic.Errf(unix.EINVAL, "%s: MPA options %+v out of range", op, o)
	case o.RTR&^(proto.RTRSend|proto.RTRWrite|proto.RTRRead) != 0:
		return rnic.Errf(unix.EINVAL, "%s: RTR set %#x unknown", op, uint8(o.RTR))
	}
	policy := initiatorPolicy(cfg, o, req.PrivateData, req.IRD, req.ORD)
	if err := policy.Validate(); err != nil {
		return rnic.Errf(unix.EINVAL, "%s: %v", op, err)
	}
	ap, err := netip.ParseAddrPort(req.Addr)
	if err != nil || ap.Port() == 0 {
		return rnic.Errf(unix.EINVAL, "%s: address %q: want ip:port", op, req.Addr)
	}
	ap = netip.AddrPortFrom(ap.Addr().Unmap(), ap.Port())
	timeout := cfg.TimeoutOrDefault()
	if req.TimeoutMs > 0 {
		timeout = time.Duration(req.TimeoutMs) * time.Millisecond
	}
	if err := s.reserveRC(req.QP, op); err != nil {
		return err
	}
	cm := &s.cm
	cm.mu.Lock()
	if err := cm.start(s); err != nil {
		cm.mu.Unlock()
		s.releaseRC(req.QP)
		return err
	}
	a := &cmActive{qp: req.QP, localPort: req.LocalPort}
	a.ctx, a.cancel = context.WithCancel(context.Background())
	cm.active[req.QP] = a
	cm.mu.Unlock()
	go s.runConnect(a, ap, policy, timeout)
	return nil
}

// CancelConnect stops the Connect in progress on QP handle, if any. It
// cancels under the lock cmSession.finish takes, so a Connect is either
// cancelled before its socket is attached or found finished, never both.
func (s *CM) CancelConnect(handle uint32) bool {
	s.cm.mu.Lock()
	defer s.cm.mu.Unlock()
	a := s.cm.active[handle]
	if a != nil {
		a.cancel()
	}
	return a != nil
}

// runConnect is the initiator: TCP connect, MPA Request, Reply, then the
// hand-off to the engine. Every way out posts exactly one CM event.
func (s *CM) runConnect(a *cmActive, ap netip.AddrPort, policy mpa.Policy, timeout time.Duration) {
	ev := s.initiate(a, ap, policy, timeout)
	ev.QP = a.qp
	if ev.Peer == "" {
		ev.Peer = ap.String()
	}
	s.cm.mu.Lock()
	if s.cm.active[a.qp] == a {
		delete(s.cm.active, a.qp)
	}
	s.cm.mu.Unlock()
	a.cancel()
	if ev.Type == proto.CMEstablished {
		return // attachConn queued it, before any CMDisconnected
	}
	s.releaseRC(a.qp)
	if ok, n := s.Dev.EventLog.Allow(time.Now()); ok { // rnic/loglimit.go
		s.Dev.Log.Infof("session %d (pid %d): RC QP %d: connection to %s failed: %v: %s%s",
			s.ID, s.Cred.Pid, a.qp, ap, ev.Type, ev.Detail, rnic.Note(n))
	}
	s.cm.post(s, ev)
}

func (s *CM) initiate(a *cmActive, ap netip.AddrPort, policy mpa.Policy, timeout time.Duration) proto.CMEvent {
	d := net.Dialer{Timeout: timeout}
	if dev := s.Dev.Cfg.Addr; dev.Is4() == ap.Addr().Is4() && dev.IsLoopback() == ap.Addr().IsLoopback() {
		d.LocalAddr = net.TCPAddrFromAddrPort(netip.AddrPortFrom(dev, a.localPort))
	} else if a.localPort != 0 {
		d.LocalAddr = &net.TCPAddr{Port: int(a.localPort)}
	}
	if a.localPort != 0 {
		// The port of a listener just closed (a passive endpoint's) may
		// still have connections in TIME_WAIT.
		d.Control = func(_, _ string, rc syscall.RawConn) error {
			var serr error
			rc.Control(func(fd uintptr) { serr = unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_REUSEADDR, 1) })
			return serr
		}
	}
	c, err := d.DialContext(a.ctx, "tcp", ap.String())
	if err != nil {
		return dialEvent(a.ctx, err)
	}
	tc := c.(*net.TCPConn)
	local := tcpAddr(tc.LocalAddr())
	fail := func(t proto.CMEventType, errno unix.Errno, detail string) proto.CMEvent {
		tc.Close()
		return proto.CMEvent{Type: t, Status: int(errno), Detail: detail, Local: local.String()}
	}
	stop := context.AfterFunc(a.ctx, func() { tc.SetDeadline(time.Unix(1, 0)) })
	defer stop()
	in := mpa.NewInitiator(policy)
	req := in.Request()
	tc.SetDeadline(time.Now().Add(timeout))
	if _, err := tc.Write(req.Append(make([]byte, 0, req.Len()))); err != nil {
		if a.ctx.Err() != nil {
			return fail(proto.CMConnectionError, unix.ECANCELED, "connect cancelled")
		}
		return fail(proto.CMConnectionError, errnoOr(err, unix.ECONNRESET), "sending the MPA Request: "+err.Error())
	}
	buf := make([]byte, mpa.FrameHeaderLen+mpa.MaxPrivateData)
	f, err := readFrame(tc, buf)
	switch {
	case err == nil:
	case a.ctx.Err() != nil:
		return fail(proto.CMConnectionError, unix.ECANCELED, "connect cancelled")
	case errors.Is(err, os.ErrDeadlineExceeded):
		return fail(proto.CMTimedOut, unix.ETIMEDOUT, "no MPA Reply within "+timeout.String())
	case errors.Is(err, mpa.ErrBadKey), errors.Is(err, mpa.ErrPrivateDataTooLong):
		tc.Write(terminateFPDU(iwerr.MPAInvalidReqReply, req.CRC, false))
		return fail(proto.CMConnectionError, unix.EPROTO, "invalid MPA Reply: "+err.Error())
	case errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF):
		return fail(proto.CMConnectionError, unix.ECONNRESET, "the responder closed the connection before its MPA Reply")
	default:
		return fail(proto.CMConnectionError, errnoOr(err, unix.ECONNRESET), "reading the MPA Reply: "+err.Error())
	}
	params, err := in.HandleReply(f)
	if err != nil {
		var rej *mpa.RejectedError
		var neg *mpa.NegotiationError
		switch {
		case errors.As(err, &rej):
			ev := fail(proto.CMRejected, unix.ECONNREFUSED, "rejected by the responder")
			ev.PrivateData = clonePD(rej.PrivateData)
			return ev
		case errors.As(err, &neg):
			// RFC 6581 §7/§9, RFC 5044 §8: the initiator reports a bad
			// Reply with a TERMINATE (LLP layer, MPA error), then closes.
			tc.Write(terminateFPDU(neg.Term, req.CRC || f.CRC, f.Markers))
			return fail(proto.CMConnectionError, unix.EPROTO, neg.Error())
		}
		return fail(proto.CMConnectionError, unix.EPROTO, err.Error())
	}
	if a.ctx.Err() != nil {
		return fail(proto.CMConnectionError, unix.ECANCELED, "connect cancelled")
	}
	tc.SetDeadline(time.Time{})
	params.PeerPrivateData = clonePD(params.PeerPrivateData)
	att, err := handOff(tc, params, true)
	if err != nil {
		return proto.CMEvent{Type: proto.CMConnectionError, Status: int(unix.EIO), Detail: err.Error(), Local: local.String()}
	}
	ev := proto.CMEvent{Type: proto.CMEstablished, QP: a.qp, Peer: att.Remote.String(), Local: att.Local.String(),
		PrivateData: params.PeerPrivateData, IRD: params.LocalIRD, ORD: params.LocalORD, MPA: mpaParams(params)}
	if err := s.attachConn(a.qp, att, ev, a); err != nil {
		return proto.CMEvent{Type: proto.CMConnectionError, Status: int(rnic.ErrnoOf(err)), Detail: err.Error(), Local: local.String()}
	}
	return ev
}

// dialEvent classifies a failed TCP connect.
func dialEvent(ctx context.Context, err error) proto.CMEvent {
	ev := proto.CMEvent{Detail: err.Error()}
	var ne net.Error
	switch {
	case ctx.Err() != nil:
		ev.Type, ev.Status, ev.Detail = proto.CMConnectionError, int(unix.ECANCELED), "connect cancelled"
	case errors.Is(err, unix.ETIMEDOUT), errors.Is(err, context.DeadlineExceeded), errors.As(err, &ne) && ne.Timeout():
		ev.Type, ev.Status = proto.CMTimedOut, int(unix.ETIMEDOUT)
	default:
		ev.Type, ev.Status = proto.CMUnreachable, int(errnoOr(err, unix.EHOSTUNREACH))
	}
	return ev
}

func errnoOr(err error, def unix.Errno) unix.Errno {
	var en unix.Errno
	if errors.As(err, &en) && en != 0 {
		return en
	}
	return def
}
