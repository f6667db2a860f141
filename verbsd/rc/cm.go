package rc

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"sync"
	"time"

	"github.com/iwarpd/iwarpd/ddp"
	"github.com/iwarpd/iwarpd/iwerr"
	"github.com/iwarpd/iwarpd/mpa"
	"github.com/iwarpd/iwarpd/proto"
	"github.com/iwarpd/iwarpd/rdmap"
	"github.com/iwarpd/iwarpd/verbsd/rnic"
	"golang.org/x/sys/unix"
)

// The connection manager (rdma_cm style) of RC queue pairs. It runs on its
// own goroutines, never on the engine: TCP listen/accept/connect and the MPA
// Request/Reply exchange use blocking sockets with deadlines. Only a
// negotiated connection enters the engine, through AttachRC (rc/conn.go),
// as a non-blocking descriptor. The engine reports the end of a connection
// through q.OnRCClosed, which only queues a CM event.
//
// Files: rc/cm.go (session state, events, hand-off), rc/cm_listen.go (listeners,
// responder), rc/cm_connect.go (initiator), rc/cm_config.go (device MPA policy),
// control_cm.go (control requests).

// cmSession is a session's CM state. It has its own lock; QP fields (qp.cm)
// are engine-owned like the rest of the QP.
type cmSession struct {
	mu        sync.Mutex
	started   bool
	closed    bool
	lastID    uint32 // listener handles and connection ids, from 1, never reused
	listeners map[uint32]*cmListener
	pending   map[uint32]*cmPending
	active    map[uint32]*cmActive // connects in progress, by QP handle
	events    chan proto.CMEvent
}

// cmEventQueue bounds CM events waiting for the session's connection; more
// are dropped (and logged), never blocking the engine.
const cmEventQueue = 256

// qpCM is the CM's state of a QP (engine-owned).
type qpCM struct {
	busy      bool // a Connect or Accept owns the QP until it attaches or fails
	connected bool // attached once (an RC QP connects at most once)
}

// start initialises the session's CM state on first use: the event pump
// and the watcher that releases everything when the session ends. Call
// with mu held. It fails once the session is over.
func (cm *cmSession) start(s *CM) error {
	if cm.closed {
		return rnic.Errf(unix.ENODEV, "the session is closing")
	}
	if cm.started {
		return nil
	}
	cm.started = true
	cm.listeners = map[uint32]*cmListener{}
	cm.pending = map[uint32]*cmPending{}
	cm.active = map[uint32]*cmActive{}
	cm.events = make(chan proto.CMEvent, cmEventQueue)
	go cm.pump(s)
	return nil
}

// nextID allocates a listener handle or connection id (mu held).
func (cm *cmSession) nextID() uint32 {
	cm.lastID++
	return cm.lastID
}

// pump sends queued CM events to the client until the session ends, then
// releases the session's listeners, pending requests and connects.
func (cm *cmSession) pump(s *CM) {
	defer cm.closeAll()
	for {
		select {
		case ev := <-cm.events:
			if s.Conn == nil {
				continue
			}
			// Never blocks on a client that does not read (rnic/session.go).
			if err := s.SendAsync(proto.Header{Version: proto.ABIVersion, Op: proto.OpCMEvent}, ev); err != nil {
				s.Dev.Log.Debugf("session %d: cm event %v: %v", s.ID, ev.Type, err)
			}
		case <-s.Done:
			return
		}
	}
}

// post queues a CM event for the client. It never blocks (the engine calls
// it through OnRCClosed).
func (cm *cmSession) post(s *CM, ev proto.CMEvent) {
	cm.mu.Lock()
	defer cm.mu.Unlock()
	if !cm.started || cm.closed {
		return
	}
	select {
	case cm.events <- ev:
	default:
		s.Dev.Log.Warnf("session %d: CM event queue full, %v event for QP %d dropped", s.ID, ev.Type, ev.QP)
	}
}

// finish takes the Connect a out of the connects in progress; false if it
// was cancelled first (CancelConnect, the session's end).
func (cm *cmSession) finish(a *cmActive) bool {
	cm.mu.Lock()
	defer cm.mu.Unlock()
	if a.ctx.Err() != nil {
		return false
	}
	if cm.active[a.qp] == a {
		delete(cm.active, a.qp)
	}
	return true
}

// closeAll ends every listener, pending request and connect of the session.
func (cm *cmSession) closeAll() {
	cm.mu.Lock()
	cm.closed = true
	ls, ps, as := cm.listeners, cm.pending, cm.active
	cm.listeners, cm.pending, cm.active = map[uint32]*cmListener{}, map[uint32]*cmPending{}, map[uint32]*cmActive{}
	cm.mu.Unlock()
	for _, l := range ls {
		l.close()
	}
	for _, p := range ps {
		p.abandon()
	}
	for _, a := range as {
		a.cancel()
	}
}

// reserveRC checks that QP handle is an RC QP in INIT that no Connect or
// Accept owns, and marks it owned.
func (s *CM) reserveRC(handle uint32, op string) error {
	return s.Eng.Do(func() error {
		q := s.qp(handle)
		switch {
		case q == nil:
			return rnic.Errf(unix.EINVAL, "%s: no QP %d", op, handle)
		case q.Type != proto.QPTypeRC:
			return rnic.Errf(unix.EINVAL, "%s: QP %d is %v; only RC QPs connect", op, handle, q.Type)
		case q.cm.busy:
			return rnic.Errf(unix.EALREADY, "%s: QP %d is already connecting", op, handle)
		case q.cm.connected || q.Conn != nil:
			return rnic.Errf(unix.EISCONN, "%s: QP %d was already connected", op, handle)
		case q.State != proto.QPStateInit:
			return rnic.Errf(unix.EINVAL, "%s: QP %d is in %v; Connect and Accept need INIT", op, handle, q.State)
		}
		q.cm.busy = true
		return nil
	})
}

// releaseRC gives up the ownership taken by reserveRC (the attempt failed).
func (s *CM) releaseRC(handle uint32) {
	s.Eng.Do(func() error {
		if q := s.qp(handle); q != nil {
			q.cm.busy = false
		}
		return nil
	})
}

// attachConn hands a negotiated connection to the engine: the QP goes to
// RTS (AttachRC), established (the CMEstablished event) is queued, and the
// connection's end will be reported as a CMDisconnected event. Both are
// queued on the engine goroutine, established first: the engine may see
// the peer's close as soon as the connection is attached (a responder that
// calls fi_shutdown right after fi_accept), and the client must hear of
// the connection, with the peer's private data, before its end (fi_cm(3):
// FI_CONNECTED carries the accept's data; fabtests' fi_cm_data read the
// FI_SHUTDOWN instead, now and then; issue 19). fd is owned by the engine
// afterwards, or closed here on failure.
//
// active is the initiator's Connect (nil for the responder). It leaves the
// session's connects in progress in the same engine command that attaches
// the socket, before established is posted: a Disconnect the client sends
// once Connect has returned then finds no Connect to cancel and ends the
// connection, and a cancel that came first fails the attach (ECANCELED).
func (s *CM) attachConn(handle uint32, a Attach, established proto.CMEvent, active *cmActive) error {
	err := s.Eng.Do(func() error {
		q := s.qp(handle)
		if q == nil || !q.cm.busy {
			unix.Close(a.FD)
			return rnic.Errf(unix.ENOENT, "QP %d was destroyed while connecting", handle)
		}
		if active != nil && !s.cm.finish(active) {
			unix.Close(a.FD)
			return rnic.Errf(unix.ECANCELED, "connect cancelled")
		}
		q.cm.busy = false
		if q.State != proto.QPStateInit {
			unix.Close(a.FD)
			return rnic.Errf(unix.EINVAL, "QP %d left INIT (%v) while connecting", handle, q.State)
		}
		q.OnRCClosed = func(reason CloseReason, term *rdmap.Terminate) {
			s.cm.post(s, closedEvent(handle, reason, term))
		}
		if err := q.Engine.AttachRC(q, a); err != nil {
			if q.Conn == nil {
				unix.Close(a.FD)
			}
			q.OnRCClosed = nil
			return err
		}
		q.cm.connected = true
		s.cm.post(s, established)
		return nil
	})
	if errors.Is(err, rnic.ErrEngineStopped) {
		unix.Close(a.FD)
	}
	return err
}

// closedEvent is the CM event of a connection's end.
func closedEvent(handle uint32, reason CloseReason, term *rdmap.Terminate) proto.CMEvent {
	ev := proto.CMEvent{Type: proto.CMDisconnected, QP: handle, Detail: reason.String()}
	switch reason {
	case ClosedTermReceived, ClosedTermSent:
		ev.Status = int(unix.ECONNABORTED)
	case ClosedSocketError:
		ev.Status = int(unix.ECONNRESET)
	}
	if term != nil {
		ev.Detail = fmt.Sprintf("%s: %v", reason, term.Err)
	}
	return ev
}

// handOff turns a connected, negotiated net.TCPConn into the descriptor the
// engine owns (non-blocking, close-on-exec) and fills the socket facts of
// the attachment. c is closed; the socket lives on in the duplicate.
func handOff(c *net.TCPConn, p mpa.Params, initiator bool) (Attach, error) {
	a := Attach{FD: -1, Params: p, Initiator: initiator, Local: tcpAddr(c.LocalAddr()), Remote: tcpAddr(c.RemoteAddr())}
	raw, err := c.SyscallConn()
	if err != nil {
		c.Close()
		return a, err
	}
	var derr error
	cerr := raw.Control(func(fd uintptr) {
		a.FD, derr = unix.FcntlInt(fd, unix.F_DUPFD_CLOEXEC, 0)
	})
	c.Close()
	if cerr != nil || derr != nil {
		return a, errors.Join(cerr, derr)
	}
	if err := unix.SetNonblock(a.FD, true); err != nil {
		unix.Close(a.FD)
		a.FD = -1
		return a, err
	}
	if mss, err := unix.GetsockoptInt(a.FD, unix.IPPROTO_TCP, unix.TCP_MAXSEG); err == nil && mss > 0 {
		a.MSS = mss
	} else {
		a.MSS = 1460
	}
	return a, nil
}

func tcpAddr(a net.Addr) netip.AddrPort {
	if t, ok := a.(*net.TCPAddr); ok {
		ap := t.AddrPort()
		return netip.AddrPortFrom(ap.Addr().Unmap(), ap.Port())
	}
	return netip.AddrPort{}
}

// terminateFPDU builds the FPDU of an LLP (MPA) TERMINATE sent after a
// failed negotiation (RFC 5044 §8, RFC 6581 §8): an untagged DDP segment on
// QN 2, MSN 1, L=1, RDMAP opcode Terminate, carrying the Terminate header
// of term (no DDP/RDMAP headers: an MPA error concerns no segment). crc and
// markers are the framing negotiated so far.
func terminateFPDU(term iwerr.Error, crc, markers bool) []byte {
	t := rdmap.TerminateFor(term, nil, nil)
	h := ddp.Header{Last: true, Version: ddp.Version, ULPControl: uint8(rdmap.MakeControl(rdmap.OpTerminate)),
		QN: rdmap.QNTerminate, MSN: 1}
	ulpdu := t.Append(h.Append(make([]byte, 0, ddp.UntaggedHeaderLen+t.Len())))
	return mpa.NewSender(crc, markers).AppendFPDU(nil, ulpdu)
}

// writeFull writes b before the deadline.
func writeFull(c net.Conn, b []byte, deadline time.Time) error {
	c.SetWriteDeadline(deadline)
	_, err := c.Write(b)
	return err
}

// Disconnect asks the engine to end QP h's connection (gracefully, or
// abortively with a Terminate); the end is reported by a CMDisconnected
// event.
func (s *CM) Disconnect(h uint32, abort bool) error {
	return s.Eng.Do(func() error {
		c := s.QPs[h]
		q := s.qp(h)
		switch {
		case c == nil:
			return rnic.Errf(unix.EINVAL, "disconnect: no QP %d", h)
		case q == nil:
			return rnic.Errf(unix.EINVAL, "disconnect: QP %d is %v, not RC", h, c.Type)
		case q.Conn == nil:
			return rnic.Errf(unix.ENOTCONN, "disconnect: QP %d is not connected", h)
		}
		q.Engine.DisconnectRC(q, abort)
		return nil
	})
}
