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
	dev    *device
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
}

func newSession(dev *device, uc *net.UnixConn) *Session {
	s := &Session{dev: dev, eng: dev.engs[0], id: dev.nextID.Add(1), bell: -1, events: make(chan proto.Event, 64), done: make(chan struct{}),
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
		}
	}
	return s
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
