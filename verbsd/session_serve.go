package verbsd

import (
	"errors"
	"fmt"

	"github.com/iwarpd/iwarpd/proto"
	"github.com/iwarpd/iwarpd/verbsd/config"
	"github.com/iwarpd/iwarpd/verbsd/rc"
	"github.com/iwarpd/iwarpd/verbsd/rnic"
	"golang.org/x/sys/unix"
)

// session is a client's control connection as the control side sees it:
// the core session (its verbs objects, its event queue) and the server
// that accepted it, whose handlers serve its requests.
type session struct {
	*rnic.Session
	srv *Server
	// rc is the session as the RC connection manager sees it (rc/cm.go).
	rc *rc.CM
}

// newSessionOf wraps a core session accepted by srv.
func newSessionOf(srv *Server, core *rnic.Session) *session {
	return &session{Session: core, srv: srv, rc: &rc.CM{Session: core}}
}

// serve reads requests until the client goes away (or the server closes
// the connection), then reclaims everything the session owned.
func (s *session) serve() {
	rnic.GuardClientMemory() // rnic/fault.go: a fault on client memory fails the request
	go s.PumpEvents()
	why, helloRefused := "the daemon closed the connection", false
	defer func() {
		close(s.Done)
		s.Conn.Close()
		s.DropReservations() // rnic/qpsock.go
		var h held
		s.Eng.Do(func() error {
			if s.Installed {
				h = held{len(s.QPs), len(s.MRs), len(s.CQs)}
			}
			s.Eng.TeardownSession(s.Session)
			return nil
		})
		s.logEnd(why, h, helloRefused) // session_log.go
		// After teardown no engine state refers to the process memory. A
		// copier stuck in a client's page (rnic/copier.go) returns when the
		// page comes or the client exits: until then the session keeps
		// counting against its user's limits.
		// A copier that never stalled is idle (nothing calls it after
		// teardown) and returns at once.
		stalled := s.Mem.Stalled()
		exited := s.Mem.Close()
		release := func() { s.Dev.Users.ReleaseAll(s.Session) }
		if !stalled {
			<-exited
		}
		select {
		case <-exited:
			release()
		default:
			s.Dev.Log.Infof("session %d (pid %d, uid %d): closed; its copier is still in a page of the client, "+
				"the session counts against the user's limits until it returns", s.ID, s.Cred.Pid, s.Cred.Uid)
			go func() { <-exited; release() }()
		}
	}()
	for {
		h, body, fds, err := s.Conn.Receive()
		if errors.Is(err, proto.ErrFDsLost) {
			// The request arrived without its descriptors (hello's
			// /proc/self/mem, a region's memfd): the daemon is out of
			// descriptors. Answer that request, as accept does.
			closeFDs(fds)
			s.reply(proto.Header{Version: proto.ABIVersion, Op: h.Op | proto.OpReply, Seq: h.Seq}, nil, nil,
				rnic.Errf(unix.EMFILE, "%v: the request's descriptors did not reach the daemon: it is out of file descriptors "+
					"(raise its limit: LimitNOFILE= in the systemd unit, ulimit -n) or more than %d were sent", h.Op, proto.MaxFDs))
			if !s.Hello {
				return
			}
			continue
		}
		if err != nil {
			closeFDs(fds)
			if errors.Is(err, proto.ErrTooLarge) || errors.Is(err, proto.ErrShortMessage) || errors.Is(err, proto.ErrBadMagic) {
				s.reply(proto.Header{Version: proto.ABIVersion, Op: proto.OpReply}, nil, nil, rnic.Errf(unix.EINVAL, "malformed control message: %v", err))
				continue
			}
			why = s.endReason(err)
			return
		}
		reply, rfds, err, quit := s.dispatch(h, body, fds)
		s.logLimit(h.Op, err)
		s.reply(proto.Header{Version: proto.ABIVersion, Op: h.Op | proto.OpReply, Seq: h.Seq}, reply, rfds, err)
		if quit {
			why = fmt.Sprintf("the daemon closed it after %v failed: %v", h.Op, err)
			helloRefused = h.Op == proto.OpHello && !s.Hello
			return
		}
	}
}

// reply sends a reply: body and fds on success, ErrorBody and the errno on
// failure.
func (s *session) reply(h proto.Header, body any, fds []int, err error) {
	if s.Conn == nil {
		return
	}
	if err != nil {
		h.Status = rnic.ErrnoOf(err)
		msg := err.Error()
		var oe *rnic.OpError
		if errors.As(err, &oe) {
			msg = oe.Msg
		}
		body, fds = proto.ErrorBody{Error: msg}, nil
	}
	s.WriteMu.Lock()
	defer s.WriteMu.Unlock()
	if serr := s.Conn.Send(h, body, fds...); serr != nil {
		s.Dev.Log.Debugf("session %d: %v", s.ID, serr)
	}
}

func closeFDs(fds []int) {
	for _, fd := range fds {
		if fd >= 0 {
			unix.Close(fd)
		}
	}
}

// dispatch serves one request. It takes ownership of fds (the handlers
// consume what they need; the rest is closed here). quit asks serve to
// close the connection after the reply.
func (s *session) dispatch(h proto.Header, body []byte, fds []int) (reply any, rfds []int, err error, quit bool) {
	defer func() { closeFDs(fds) }()
	defer func() { // rnic/fault.go
		if r := recover(); r != nil {
			addr, ok := rnic.FaultAddr(r)
			if !ok {
				panic(r)
			}
			reply, rfds, quit = nil, nil, true
			err = rnic.Errf(unix.EFAULT, "%v: the client's shared memory faulted at %#x; session closed", h.Op, addr)
		}
	}()
	if h.Op&(proto.OpReply|proto.OpEvent) != 0 || !h.Op.Valid() {
		return nil, nil, rnic.Errf(unix.EINVAL, "unknown request %v", h.Op), false
	}
	if !s.Hello {
		if h.Op != proto.OpHello {
			return nil, nil, rnic.Errf(unix.EINVAL, "the first request must be hello, not %v", h.Op), false
		}
		return s.doHello(h, body, fds)
	}
	if h.Version != proto.ABIVersion {
		return nil, nil, rnic.Errf(unix.EPROTO, "%v", (&proto.VersionError{Local: proto.ABIVersion, Peer: h.Version, Side: "daemon"}).Error()), false
	}
	if s.Inspect && h.Op != proto.OpInspect && h.Op != proto.OpQueryDevice && h.Op != proto.OpQueryPort {
		return nil, nil, rnic.Errf(unix.EPERM, "an inspect session may not %v", h.Op), false
	}
	handler := handlers[h.Op]
	if handler == nil {
		return nil, nil, rnic.Errf(unix.EINVAL, "%v is not a request after hello", h.Op), false
	}
	reply, err = handler(s, body, fds)
	return reply, nil, err, false
}

func (s *session) doHello(h proto.Header, body []byte, fds []int) (any, []int, error, bool) {
	var req proto.HelloRequest
	if h.Version != proto.ABIVersion {
		return nil, nil, rnic.Errf(unix.EPROTO, "%s", (&proto.VersionError{Local: proto.ABIVersion, Peer: h.Version, Side: "daemon"}).Error()), true
	}
	if err := proto.Unmarshal(body, &req); err != nil {
		return nil, nil, rnic.Errf(unix.EINVAL, "hello: %v", err), false
	}
	if req.ABI != proto.ABIVersion {
		return nil, nil, rnic.Errf(unix.EPROTO, "%s", (&proto.VersionError{Local: proto.ABIVersion, Peer: req.ABI, Side: "daemon"}).Error()), true
	}
	if err := s.Dev.Users.Acquire(s.Session, config.ResSessions, 1); err != nil { // rnic/userlimits.go
		return nil, nil, err, true
	}
	s.Client = req.Client
	s.Inspect = req.Inspect
	if req.ProcessMem && !req.Inspect { // rnic/procmem.go
		fd, err := takeFD(fds, 0, "hello (process memory)")
		if err == nil {
			err = s.AttachProcMem(fd)
		}
		if err != nil {
			return nil, nil, err, true
		}
	}
	// Inspect sessions own nothing and are not listed by Inspect.
	if err := s.Eng.Do(func() error {
		if s.Inspect {
			return nil
		}
		fd, err := s.Eng.NewDoorbell()
		if err != nil {
			return err
		}
		s.Bell = fd
		if !s.Eng.Shared {
			s.Eng.Bells[int32(fd)] = s.Session // rnic/ready.go: its ring readies its QPs
		}
		s.Eng.Sessions[s.ID] = s.Session
		s.Installed = true
		return nil
	}); err != nil {
		return nil, nil, err, true
	}
	s.Hello = true
	s.Dev.Log.Debugf("session %d: hello from %q (pid %d, uid %d, inspect %v)", s.ID, req.Client, s.Cred.Pid, s.Cred.Uid, req.Inspect)
	s.logStart() // session_log.go
	reply := proto.HelloReply{ABI: proto.ABIVersion, Daemon: s.Dev.Cfg.Version, SessionID: s.ID, Device: s.Dev.Cfg.Device,
		Addr: s.Dev.Cfg.Addr.String()}
	reply.NetnsCookie, _ = s.Dev.NetnsCookie() // rnic/qpsock.go: the client makes its QP sockets only in this namespace
	if s.Inspect {
		return reply, nil, nil, false
	}
	return reply, []int{s.Bell, s.Eng.StatusFD}, nil, false
}
