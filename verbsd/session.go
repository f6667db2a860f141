package verbsd

import (
	"errors"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/iwarpd/iwarpd/proto"
	"github.com/iwarpd/iwarpd/verbsd/config"
	"golang.org/x/sys/unix"
)

// Session is one client connection and its verbs objects. The connection
// side (serve, replies, events) runs on the Session's goroutines; the
// object tables are the engine's and are touched only inside engine.Do.
type Session struct {
	srv    *Server
	eng    *Engine
	id     uint64
	conn   *proto.Conn // nil in the fuzz harness
	cred   unix.Ucred
	client string
	// peer pins the client process for process-memory MRs (procmem.go);
	// nil when it could not be opened (such registrations fail).
	peer    *peerProcess
	peerErr error
	// privBind: the client could bind privileged ports itself (bind.go).
	privBind bool

	hello   bool
	inspect bool

	writeMu sync.Mutex
	events  chan proto.Event
	done    chan struct{}

	// Engine-owned.
	installed bool
	// faulted: its memory faulted on an engine other than 0 (fault.go);
	// no engine serves its QPs until its teardown.
	faulted    atomic.Bool
	bell       int // the session's doorbell eventfd (doorbell.go); -1 if none
	lastHandle uint32
	pds        map[uint32]*pd
	mrs        map[uint32]*mr
	keys       map[uint32]*mr // every MR's lkey and rkey (keys.go)
	channels   map[uint32]*compChannel
	cqs        map[uint32]*cq
	qps        map[uint32]*QP
	srqs       map[uint32]*srq
	regBytes   uint64
	stage      stagePool // staging buffers for process MRs (stage.go)

	// held is what the session holds of its user's limits (userlimits.go;
	// guarded by srv.users.mu).
	held [config.NumUserRes]uint64
	// eventsDropped counts asynchronous events lost to a full queue (the
	// client does not read its control socket; cq.go sendEvent).
	eventsDropped atomic.Int64
	// bellRefs: the QPs of this session on each engine (several engines),
	// whose epoll set then holds its doorbell (engines.go bellWatch).
	bellRefs map[*Engine]int

	// Connection manager state (cm.go; its own lock, not engine-owned).
	cm cmSession
}

func newSession(srv *Server, uc *net.UnixConn) *Session {
	s := &Session{srv: srv, eng: srv.eng, id: srv.nextID.Add(1), bell: -1, events: make(chan proto.Event, 64), done: make(chan struct{}),
		pds: map[uint32]*pd{}, mrs: map[uint32]*mr{}, keys: map[uint32]*mr{}, channels: map[uint32]*compChannel{}, cqs: map[uint32]*cq{},
		qps: map[uint32]*QP{}, srqs: map[uint32]*srq{}}
	if uc != nil {
		s.conn = proto.NewConn(uc)
		if raw, err := uc.SyscallConn(); err == nil {
			raw.Control(func(fd uintptr) {
				if cred, err := unix.GetsockoptUcred(int(fd), unix.SOL_SOCKET, unix.SO_PEERCRED); err == nil {
					s.cred = *cred
					s.peer, s.peerErr = openPeer(int(fd), cred.Pid)
				}
			})
			s.privBind = s.cred.Uid == 0 || mayBindPrivileged(s.cred) // bind.go
		}
	}
	return s
}

// serve reads requests until the client goes away (or the server closes
// the connection), then reclaims everything the session owned.
func (s *Session) serve() {
	guardClientMemory() // fault.go: a fault on client memory fails the request
	go s.pumpEvents()
	defer func() {
		close(s.done)
		s.conn.Close()
		s.eng.Do(func() error { s.eng.teardownSession(s); return nil })
		s.peer.Close() // after teardown: no engine state refers to it
		s.srv.users.releaseAll(s)
		s.srv.log.Debugf("session %d (pid %d, uid %d): closed, resources reclaimed", s.id, s.cred.Pid, s.cred.Uid)
	}()
	for {
		h, body, fds, err := s.conn.Receive()
		if err != nil {
			closeFDs(fds)
			if errors.Is(err, proto.ErrTooLarge) || errors.Is(err, proto.ErrShortMessage) || errors.Is(err, proto.ErrBadMagic) {
				s.reply(proto.Header{Version: proto.ABIVersion, Op: proto.OpReply}, nil, nil, errf(unix.EINVAL, "malformed control message: %v", err))
				continue
			}
			return
		}
		reply, rfds, err, quit := s.dispatch(h, body, fds)
		s.reply(proto.Header{Version: proto.ABIVersion, Op: h.Op | proto.OpReply, Seq: h.Seq}, reply, rfds, err)
		if quit {
			return
		}
	}
}

// reply sends a reply: body and fds on success, ErrorBody and the errno on
// failure.
func (s *Session) reply(h proto.Header, body any, fds []int, err error) {
	if s.conn == nil {
		return
	}
	if err != nil {
		h.Status = errnoOf(err)
		msg := err.Error()
		var oe *opError
		if errors.As(err, &oe) {
			msg = oe.msg
		}
		body, fds = proto.ErrorBody{Error: msg}, nil
	}
	s.writeMu.Lock()
	defer s.writeMu.Unlock()
	if serr := s.conn.Send(h, body, fds...); serr != nil {
		s.srv.log.Debugf("session %d: %v", s.id, serr)
	}
}

// pumpEvents sends queued asynchronous events to the client. It never
// blocks the daemon on a client that does not read (issue 13, point 8): a
// send that finds the socket buffer full keeps the event and retries with a
// growing pause until the session ends, while sendEvent drops and counts
// what no longer fits the queue (events_dropped in iwarpctl).
func (s *Session) pumpEvents() {
	for {
		select {
		case ev := <-s.events:
			s.sendAsync(proto.Header{Version: proto.ABIVersion, Op: proto.OpEvent}, ev)
		case <-s.done:
			return
		}
	}
}

// Bounds of sendAsync's pause while a client's socket buffer is full.
const (
	asyncRetryFirst = time.Millisecond
	asyncRetryMax   = 100 * time.Millisecond
)

// sendAsync sends an unsolicited message (event, CM event) with
// non-blocking sends, never holding writeMu while it waits: it returns nil
// once sent, or an error when the send failed for another reason than a
// full buffer or the session ended first.
func (s *Session) sendAsync(h proto.Header, body any) error {
	if s.conn == nil {
		return nil
	}
	pause := asyncRetryFirst
	for {
		s.writeMu.Lock()
		err := s.conn.TrySend(h, body)
		s.writeMu.Unlock()
		if !errors.Is(err, unix.EAGAIN) {
			return err
		}
		select {
		case <-s.done:
			return err
		case <-time.After(pause):
		}
		pause = min(2*pause, asyncRetryMax)
	}
}

// shutdown tells the client the device is going away and closes the
// connection; serve then reclaims the session. It never waits for the
// client: the device-fatal event is sent only if no other send is in
// progress and the socket has room, and closing the connection ends any
// send blocked on a client that does not read.
func (s *Session) shutdown() {
	if s.writeMu.TryLock() {
		s.conn.TrySend(proto.Header{Version: proto.ABIVersion, Op: proto.OpEvent},
			proto.Event{Type: proto.EventDeviceFatal, Detail: "iwarpd is shutting down"})
		s.writeMu.Unlock()
	}
	s.conn.UnixConn().CloseRead() // wakes serve's Receive
	s.conn.Close()
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
func (s *Session) dispatch(h proto.Header, body []byte, fds []int) (reply any, rfds []int, err error, quit bool) {
	defer func() { closeFDs(fds) }()
	defer func() { // fault.go
		if r := recover(); r != nil {
			addr, ok := faultAddr(r)
			if !ok {
				panic(r)
			}
			reply, rfds, quit = nil, nil, true
			err = errf(unix.EFAULT, "%v: the client's shared memory faulted at %#x; session closed", h.Op, addr)
		}
	}()
	if h.Op&(proto.OpReply|proto.OpEvent) != 0 || !h.Op.Valid() {
		return nil, nil, errf(unix.EINVAL, "unknown request %v", h.Op), false
	}
	if !s.hello {
		if h.Op != proto.OpHello {
			return nil, nil, errf(unix.EINVAL, "the first request must be hello, not %v", h.Op), false
		}
		return s.doHello(h, body)
	}
	if h.Version != proto.ABIVersion {
		return nil, nil, errf(unix.EPROTO, "%v", (&proto.VersionError{Local: proto.ABIVersion, Peer: h.Version, Side: "daemon"}).Error()), false
	}
	if s.inspect && h.Op != proto.OpInspect && h.Op != proto.OpQueryDevice && h.Op != proto.OpQueryPort {
		return nil, nil, errf(unix.EPERM, "an inspect session may not %v", h.Op), false
	}
	handler := handlers[h.Op]
	if handler == nil {
		return nil, nil, errf(unix.EINVAL, "%v is not a request after hello", h.Op), false
	}
	reply, err = handler(s, body, fds)
	return reply, nil, err, false
}

func (s *Session) doHello(h proto.Header, body []byte) (any, []int, error, bool) {
	var req proto.HelloRequest
	if h.Version != proto.ABIVersion {
		return nil, nil, errf(unix.EPROTO, "%s", (&proto.VersionError{Local: proto.ABIVersion, Peer: h.Version, Side: "daemon"}).Error()), true
	}
	if err := proto.Unmarshal(body, &req); err != nil {
		return nil, nil, errf(unix.EINVAL, "hello: %v", err), false
	}
	if req.ABI != proto.ABIVersion {
		return nil, nil, errf(unix.EPROTO, "%s", (&proto.VersionError{Local: proto.ABIVersion, Peer: req.ABI, Side: "daemon"}).Error()), true
	}
	if err := s.srv.users.acquire(s, config.ResSessions, 1); err != nil { // userlimits.go
		return nil, nil, err, true
	}
	s.client = req.Client
	s.inspect = req.Inspect
	// Inspect sessions own nothing and are not listed by Inspect.
	if err := s.eng.Do(func() error {
		if s.inspect {
			return nil
		}
		fd, err := s.eng.newDoorbell()
		if err != nil {
			return err
		}
		s.bell = fd
		if !s.eng.shared {
			s.eng.bells[int32(fd)] = s // ready.go: its ring readies its QPs
		}
		s.eng.sessions[s.id] = s
		s.installed = true
		return nil
	}); err != nil {
		return nil, nil, err, true
	}
	s.hello = true
	s.srv.log.Debugf("session %d: hello from %q (pid %d, uid %d, inspect %v)", s.id, req.Client, s.cred.Pid, s.cred.Uid, req.Inspect)
	reply := proto.HelloReply{ABI: proto.ABIVersion, Daemon: s.srv.cfg.Version, SessionID: s.id, Device: s.srv.cfg.Device,
		Addr: s.srv.cfg.Addr.String()}
	if s.inspect {
		return reply, nil, nil, false
	}
	return reply, []int{s.bell, s.eng.statusFD}, nil, false
}

// teardownSession destroys every object of s (engine side): the client went
// away or the daemon is stopping.
func (e *Engine) teardownSession(s *Session) {
	if !s.installed {
		return
	}
	for _, q := range s.qps {
		q.eng.removeQP(q) // engines.go: each on its own engine
		closeQP(q)
	}
	for _, x := range s.srqs {
		x.region.Close()
	}
	for _, c := range s.cqs {
		c.region.Close()
	}
	for _, ch := range s.channels {
		unix.Close(ch.fd)
	}
	for _, m := range s.mrs {
		m.region.Close()
	}
	s.qps, s.srqs, s.cqs, s.channels, s.mrs, s.pds = map[uint32]*QP{}, map[uint32]*srq{}, map[uint32]*cq{},
		map[uint32]*compChannel{}, map[uint32]*mr{}, map[uint32]*pd{}
	s.keys = map[uint32]*mr{}
	s.regBytes = 0
	e.closeDoorbell(s.bell)
	s.bell = -1
	s.installed = false
	delete(e.sessions, s.id)
}
