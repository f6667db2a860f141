package rnic

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
	Dev    *Device
	Eng    *Engine
	ID     uint64
	Conn   *proto.Conn // nil in the fuzz harness
	Cred   unix.Ucred
	Client string
	// Mem is the client's address space for process-memory MRs: the
	// /proc/self/mem it handed over at Hello, and its copier
	// (rnic/procmem.go, rnic/copier.go); nil if it handed over none (such
	// registrations fail).
	Mem *ProcMem
	// PrivBind: the client could bind privileged ports itself (rnic/bind.go).
	PrivBind bool

	Hello   bool
	Inspect bool

	WriteMu sync.Mutex
	events  chan proto.Event
	Done    chan struct{}

	// Engine-owned.
	Installed bool
	// faulted: its memory faulted on an engine other than 0 (rnic/fault.go);
	// no engine serves its QPs until its teardown.
	faulted    atomic.Bool
	Bell       int // the session's doorbell eventfd (rnic/doorbell.go); -1 if none
	lastHandle uint32
	PDs        map[uint32]*PD
	MRs        map[uint32]*MR
	Keys       map[uint32]*MR // every MR's lkey and rkey (rnic/keys.go)
	Channels   map[uint32]*CompChannel
	CQs        map[uint32]*CQ
	QPs        map[uint32]*QP
	SRQs       map[uint32]*SRQ
	RegBytes   uint64
	stage      stagePool // staging buffers for process MRs (rnic/stage.go)

	// held is what the session holds of its user's limits (rnic/userlimits.go;
	// guarded by srv.users.mu).
	held [config.NumUserRes]uint64
	// EventsDropped counts asynchronous events lost to a full queue (the
	// client does not read its control socket; rnic/cq.go SendEvent).
	EventsDropped atomic.Int64
	// bellRefs: the QPs of this session on each engine (several engines),
	// whose epoll set then holds its doorbell (rnic/engines.go bellWatch).
	bellRefs map[*Engine]int
	// reserved: the ports reserved for this session's client-made QP
	// sockets, oldest first (rnic/qpsock.go; guarded by Dev.reserved.mu).
	reserved []uint16
}

func NewSession(dev *Device, uc *net.UnixConn) *Session {
	s := &Session{Dev: dev, Eng: dev.Engs[0], ID: dev.nextID.Add(1), Bell: -1, events: make(chan proto.Event, 64), Done: make(chan struct{}),
		PDs: map[uint32]*PD{}, MRs: map[uint32]*MR{}, Keys: map[uint32]*MR{}, Channels: map[uint32]*CompChannel{}, CQs: map[uint32]*CQ{},
		QPs: map[uint32]*QP{}, SRQs: map[uint32]*SRQ{}}
	if uc != nil {
		s.Conn = proto.NewConn(uc)
		if raw, err := uc.SyscallConn(); err == nil {
			raw.Control(func(fd uintptr) {
				if cred, err := unix.GetsockoptUcred(int(fd), unix.SOL_SOCKET, unix.SO_PEERCRED); err == nil {
					s.Cred = *cred
				}
			})
		}
	}
	return s
}

// AttachProcMem takes the client's /proc/self/mem (Hello; fd is the
// session's from now on, closed on failure) after CheckProcMemFD.
func (s *Session) AttachProcMem(fd int) error {
	if err := CheckProcMemFD(fd); err != nil {
		unix.Close(fd)
		return err
	}
	s.Mem = NewProcMem(fd, s.Dev.Cfg.StallTimeout(), s.procStalled)
	return nil
}

// procStalled runs when an access to the session's process memory ran
// past the bound (rnic/copier.go): the user gets a strike
// (rnic/procstrike.go), and the log says what happened and what to do.
func (s *Session) procStalled(what string) {
	n := s.Dev.Strikes.Strike(s.Cred.Uid, time.Now())
	s.Dev.Log.Warnf("session %d (pid %d, uid %d, %q): a %s of its process memory did not finish within %v "+
		"(a page that does not come: FUSE, NFS, userfaultfd): that access failed, the QP making it moves to ERROR, "+
		"every further process-memory access of the session fails at once and it may register no more process memory; "+
		"strike %d of %d within %v for uid %d (at %d its process-memory registrations are refused for %v). "+
		"The client should register resident memory or shared buffers (docs/memory-registration.md)",
		s.ID, s.Cred.Pid, s.Cred.Uid, s.Client, what, s.Dev.Cfg.StallTimeout(), n, StrikeLimit, StrikeWindow, s.Cred.Uid, StrikeLimit, StrikeBan)
}

// PumpEvents sends queued asynchronous events to the client. It never
// blocks the daemon on a client that does not read: a
// send that finds the socket buffer full keeps the event and retries with a
// growing pause until the session ends, while SendEvent drops and counts
// what no longer fits the queue (events_dropped in iwarpctl).
func (s *Session) PumpEvents() {
	for {
		select {
		case ev := <-s.events:
			s.SendAsync(proto.Header{Version: proto.ABIVersion, Op: proto.OpEvent}, ev)
		case <-s.Done:
			return
		}
	}
}

// Bounds of SendAsync's pause while a client's socket buffer is full.
const (
	asyncRetryFirst = time.Millisecond
	asyncRetryMax   = 100 * time.Millisecond
)

// SendAsync sends an unsolicited message (event, CM event) with
// non-blocking sends, never holding WriteMu while it waits: it returns nil
// once sent, or an error when the send failed for another reason than a
// full buffer or the session ended first.
func (s *Session) SendAsync(h proto.Header, body any) error {
	if s.Conn == nil {
		return nil
	}
	pause := asyncRetryFirst
	for {
		s.WriteMu.Lock()
		err := s.Conn.TrySend(h, body)
		s.WriteMu.Unlock()
		if !errors.Is(err, unix.EAGAIN) {
			return err
		}
		select {
		case <-s.Done:
			return err
		case <-time.After(pause):
		}
		pause = min(2*pause, asyncRetryMax)
	}
}

// Shutdown tells the client the device is going away and closes the
// connection; serve then reclaims the session. It never waits for the
// client: the device-fatal event is sent only if no other send is in
// progress and the socket has room, and closing the connection ends any
// send blocked on a client that does not read.
func (s *Session) Shutdown() {
	if s.WriteMu.TryLock() {
		s.Conn.TrySend(proto.Header{Version: proto.ABIVersion, Op: proto.OpEvent},
			proto.Event{Type: proto.EventDeviceFatal, Detail: "iwarpd is shutting down"})
		s.WriteMu.Unlock()
	}
	s.Conn.UnixConn().CloseRead() // wakes serve's Receive
	s.Conn.Close()
}

// TeardownSession destroys every object of s (engine side): the client went
// away or the daemon is stopping.
func (e *Engine) TeardownSession(s *Session) {
	if !s.Installed {
		return
	}
	for _, q := range s.QPs {
		q.Eng.RemoveQP(q) // rnic/engines.go: each on its own engine
		CloseQP(q)
	}
	for _, x := range s.SRQs {
		x.Region.Close()
	}
	for _, c := range s.CQs {
		c.Region.Close()
	}
	for _, ch := range s.Channels {
		unix.Close(ch.FD)
	}
	for _, m := range s.MRs {
		m.Region.Close()
	}
	s.QPs, s.SRQs, s.CQs, s.Channels, s.MRs, s.PDs = map[uint32]*QP{}, map[uint32]*SRQ{}, map[uint32]*CQ{},
		map[uint32]*CompChannel{}, map[uint32]*MR{}, map[uint32]*PD{}
	s.Keys = map[uint32]*MR{}
	s.RegBytes = 0
	e.closeDoorbell(s.Bell)
	s.Bell = -1
	s.Installed = false
	delete(e.Sessions, s.ID)
}
