package ofverbs

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/iwarpd/iwarpd/proto"
	"golang.org/x/sys/unix"
)

// Connection management of RC queue pairs, in the manner of rdma_cm. The
// passive side listens and takes connection requests:
//
//	l, _ := ctx.Listen(":0")            // l.Addr() has the port
//	req, _ := l.GetRequest(0)           // blocks
//	_ = req.Accept(qp, ofverbs.ConnParam{PrivateData: hello})
//
// The active side connects an RC QP in INIT:
//
//	err := qp.Connect(addr, ofverbs.ConnParam{PrivateData: hello})
//	var rej *ofverbs.RejectedError // errors.Is(err, ofverbs.ErrRejected)
//
// The daemon runs TCP and the MPA exchange (Rev 1 or 2, CRC, markers,
// IRD/ORD, peer-to-peer RTR); the connection then belongs to the QP (RTS).
// Its end is a CMDisconnected event on QP.CMEvents.

// Re-exported CM types.
type (
	CMEventType = proto.CMEventType
	MPAOptions  = proto.MPAOptions // zero fields: the device's policy (iwarpd -mpa-* flags)
	MPAParams   = proto.MPAParams  // what an MPA exchange negotiated
	MPACRC      = proto.MPACRC
	Toggle      = proto.Toggle
	RTRSet      = proto.RTRSet
)

// CM event types.
const (
	CMConnectRequest  = proto.CMConnectRequest
	CMEstablished     = proto.CMEstablished
	CMRejected        = proto.CMRejected
	CMUnreachable     = proto.CMUnreachable
	CMTimedOut        = proto.CMTimedOut
	CMDisconnected    = proto.CMDisconnected
	CMConnectionError = proto.CMConnectionError
)

// MPA option values.
const (
	MPACRCDefault   = proto.MPACRCDefault
	MPACRCPreferred = proto.MPACRCPreferred
	MPACRCRequired  = proto.MPACRCRequired
	MPACRCOff       = proto.MPACRCOff
	ToggleDefault   = proto.ToggleDefault
	ToggleOn        = proto.ToggleOn
	ToggleOff       = proto.ToggleOff
	RTRSend         = proto.RTRSend
	RTRWrite        = proto.RTRWrite
	RTRRead         = proto.RTRRead
)

// ConnParam are one side's connection parameters.
type ConnParam struct {
	// PrivateData goes to the peer in the MPA Request or Reply: at most 508
	// octets with MPA Rev 2 (the IRD/ORD block takes 4), 512 with Rev 1.
	PrivateData []byte
	// IRD and ORD: inbound and outbound RDMA Read depth (0: the device
	// default, 16; at most 128). Exchanged with MPA Rev 2 (RFC 6581).
	IRD, ORD uint16
	// MPA options of the active side (Connect); Accept uses the device's.
	MPA MPAOptions
	// Timeout bounds the TCP connect and the wait for the MPA Reply
	// (0: the device's MPA timeout, 10 s by default). Connect only.
	Timeout time.Duration
}

// ErrRejected is matched (errors.Is) by the error of a Connect the peer
// rejected; errors.As with *RejectedError gives the peer's private data.
var ErrRejected = errors.New("ofverbs: connection rejected by the peer")

// RejectedError is a Connect rejected by the responder (MPA Reply R=1).
type RejectedError struct {
	Peer        netip.AddrPort
	PrivateData []byte // the responder's reason, its ULP private data
}

func (e *RejectedError) Error() string {
	return fmt.Sprintf("ofverbs: connect: rejected by %v (%d octets of private data)", e.Peer, len(e.PrivateData))
}

// Is makes errors.Is(err, ErrRejected) true.
func (e *RejectedError) Is(target error) bool { return target == ErrRejected }

// CMEvent is a connection-manager event of a QP (QP.CMEvents).
type CMEvent struct {
	Type        CMEventType
	QP          *QP
	Peer, Local netip.AddrPort
	PrivateData []byte // the peer's
	IRD, ORD    uint16
	Errno       unix.Errno // 0 or why (CMDisconnected: ECONNABORTED after a Terminate, ECONNRESET)
	Detail      string
	MPA         *MPAParams // CMEstablished
}

// ConnInfo describes a QP's connection (QP.ConnInfo).
type ConnInfo struct {
	Connected   bool // Connect or Accept succeeded (it stays true after a disconnect)
	Peer, Local netip.AddrPort
	PrivateData []byte // what the peer sent in its Request or Reply
	IRD, ORD    uint16 // in force after the IRD/ORD exchange
	MPA         MPAParams
}

// cmState is a Context's connection-manager bookkeeping.
type cmState struct {
	mu        sync.Mutex
	listeners map[uint32]*Listener
	early     []*ConnRequest // requests whose Listen reply has not arrived yet
	qps       map[uint32]*qpConn
	dropped   atomic.Uint64
}

// qpConn is the CM state of one QP.
type qpConn struct {
	events chan CMEvent
	waiter chan CMEvent // a Connect waiting for its outcome
	info   ConnInfo
}

const (
	cmEventQueue   = 64
	maxListenQueue = 128 // the daemon's largest backlog
)

// qp returns the CM state of QP handle h, creating it (mu held).
func (s *cmState) qp(h uint32) *qpConn {
	if s.qps == nil {
		s.qps = map[uint32]*qpConn{}
	}
	st := s.qps[h]
	if st == nil {
		st = &qpConn{events: make(chan CMEvent, cmEventQueue)}
		s.qps[h] = st
	}
	return st
}

// dispatchCMEvent delivers an OpCMEvent (reader goroutine): connection
// requests to their listener, a Connect's outcome to the waiting Connect,
// everything else to the QP's CMEvents queue.
func (c *Context) dispatchCMEvent(body []byte) {
	var ev proto.CMEvent
	if err := json.Unmarshal(body, &ev); err != nil {
		c.cm.dropped.Add(1)
		return
	}
	s := &c.cm
	if ev.Type == proto.CMConnectRequest {
		r := &ConnRequest{listener: ev.Listener, id: ev.Conn, peer: parseAddr(ev.Peer), local: parseAddr(ev.Local),
			pd: ev.PrivateData, ird: ev.IRD, ord: ev.ORD}
		if ev.MPA != nil {
			r.mpa = *ev.MPA
		}
		s.mu.Lock()
		l := s.listeners[ev.Listener]
		if l == nil {
			if len(s.early) < maxListenQueue {
				s.early = append(s.early, r)
			} else {
				c.cm.dropped.Add(1)
			}
		}
		s.mu.Unlock()
		if l == nil {
			return
		}
		r.l = l
		select {
		case l.reqs <- r:
		default: // the daemon drops it unanswered after its MPA timeout
			c.cm.dropped.Add(1)
		}
		return
	}
	c.mu.Lock()
	q := c.qps[ev.QP]
	c.mu.Unlock()
	e := CMEvent{Type: ev.Type, QP: q, Peer: parseAddr(ev.Peer), Local: parseAddr(ev.Local), PrivateData: ev.PrivateData,
		IRD: ev.IRD, ORD: ev.ORD, Errno: unix.Errno(ev.Status), Detail: ev.Detail, MPA: ev.MPA}
	s.mu.Lock()
	st := s.qp(ev.QP)
	if ev.Type == proto.CMEstablished {
		st.info.set(e)
	}
	w := st.waiter
	if w != nil && ev.Type != proto.CMDisconnected {
		st.waiter = nil
	} else {
		w = nil
	}
	s.mu.Unlock()
	if w != nil {
		w <- e // capacity 1, one outcome per Connect
		return
	}
	select {
	case st.events <- e:
	default:
		c.cm.dropped.Add(1)
	}
}

func (i *ConnInfo) set(e CMEvent) {
	*i = ConnInfo{Connected: true, Peer: e.Peer, Local: e.Local, PrivateData: e.PrivateData, IRD: e.IRD, ORD: e.ORD}
	if e.MPA != nil {
		i.MPA = *e.MPA
	}
}

func parseAddr(s string) netip.AddrPort {
	ap, _ := netip.ParseAddrPort(s)
	return ap
}

// Listener is a TCP listening endpoint of the daemon, owned by this Context.
type Listener struct {
	ctx    *Context
	handle uint32
	addr   netip.AddrPort
	reqs   chan *ConnRequest
	done   chan struct{}

	closeMu sync.Mutex
	closed  atomic.Bool
}

// Listen makes the daemon listen on addr ("ip:port", or ":port" for the
// device address; port 0 picks an ephemeral port, see Addr) for RC
// connections. Errors: EADDRINUSE, EADDRNOTAVAIL, EINVAL.
func (c *Context) Listen(addr string) (*Listener, error) {
	return c.ListenBacklog(addr, 0)
}

// ListenBacklog is Listen with a bound on connection requests in MPA
// negotiation or awaiting Accept/Reject (0: 16, at most 128).
func (c *Context) ListenBacklog(addr string, backlog int) (*Listener, error) {
	var rep proto.ListenReply
	l := &Listener{ctx: c, reqs: make(chan *ConnRequest, maxListenQueue), done: make(chan struct{})}
	if err := c.call(proto.OpListen, proto.ListenRequest{Addr: addr, Backlog: backlog}, &rep); err != nil {
		return nil, err
	}
	l.handle = rep.Handle
	l.addr = parseAddr(rep.Addr)
	c.cm.mu.Lock()
	defer c.cm.mu.Unlock()
	if c.cm.listeners == nil {
		c.cm.listeners = map[uint32]*Listener{}
	}
	c.cm.listeners[l.handle] = l
	// Requests that overtook the reply (the daemon's event pump and its
	// replies are not ordered).
	for _, r := range c.cm.early {
		if r.l == nil && r.listener == l.handle {
			r.l = l
			l.reqs <- r
		}
	}
	c.cm.early = slices.DeleteFunc(c.cm.early, func(r *ConnRequest) bool { return r.l != nil })
	return l, nil
}

// Addr returns the address the listener is bound to (with the actual port).
func (l *Listener) Addr() netip.AddrPort { return l.addr }

// Handle returns the daemon's handle of the listener.
func (l *Listener) Handle() uint32 { return l.handle }

// GetRequest waits for the next connection request (timeout ≤ 0: no
// limit). Errors: ETIMEDOUT, EINVAL (listener closed), ENODEV (session
// over). A request not answered within the daemon's MPA timeout is closed
// by the daemon.
func (l *Listener) GetRequest(timeout time.Duration) (*ConnRequest, error) {
	const op = "get-request"
	var tc <-chan time.Time
	if timeout > 0 {
		t := time.NewTimer(timeout)
		defer t.Stop()
		tc = t.C
	}
	select {
	case r := <-l.reqs:
		return r, nil
	default:
	}
	select {
	case r := <-l.reqs:
		return r, nil
	case <-l.done:
		return nil, closedError(op, "listener")
	case <-l.ctx.done:
		if err := l.ctx.sessionErr(op); err != nil {
			return nil, err
		}
		return nil, newError(op, unix.ENODEV, msgDaemonGone)
	case <-tc:
		return nil, newError(op, unix.ETIMEDOUT, "no connection request within %v", timeout)
	}
}

// Close stops listening; requests not yet answered are dropped. Idempotent.
func (l *Listener) Close() error {
	l.closeMu.Lock()
	defer l.closeMu.Unlock()
	if l.closed.Load() {
		return nil
	}
	if err := l.ctx.destroy(proto.OpCloseListener, l.handle); err != nil {
		return err
	}
	l.closed.Store(true)
	close(l.done)
	l.ctx.cm.mu.Lock()
	delete(l.ctx.cm.listeners, l.handle)
	l.ctx.cm.mu.Unlock()
	return nil
}

// ConnRequest is a peer's MPA Request, waiting for Accept or Reject.
type ConnRequest struct {
	l           *Listener
	listener    uint32
	id          uint32
	peer, local netip.AddrPort
	pd          []byte
	ird, ord    uint16
	mpa         MPAParams
}

// Peer returns the initiator's address.
func (r *ConnRequest) Peer() netip.AddrPort { return r.peer }

// Local returns the address the request arrived at.
func (r *ConnRequest) Local() netip.AddrPort { return r.local }

// PrivateData returns the initiator's private data (without the MPA Rev 2
// IRD/ORD block).
func (r *ConnRequest) PrivateData() []byte { return r.pd }

// IRD returns the initiator's inbound RDMA Read depth (0 with MPA Rev 1).
func (r *ConnRequest) IRD() uint16 { return r.ird }

// ORD returns the initiator's outbound RDMA Read depth (0 with MPA Rev 1).
func (r *ConnRequest) ORD() uint16 { return r.ord }

// MPA returns what the Request asked for (Revision, CRC, MarkersTx: the
// initiator wants markers, PeerToPeer).
func (r *ConnRequest) MPA() MPAParams { return r.mpa }

// Accept connects qp (an RC QP in INIT, of this Context) to the initiator:
// the daemon sends the MPA Reply with p.PrivateData and IRD/ORD, and qp is
// in RTS when Accept returns nil. (p.MPA and p.Timeout are not used: the
// responder follows the device's policy.)
func (r *ConnRequest) Accept(qp *QP, p ConnParam) error {
	const op = "accept"
	if qp == nil || qp.ctx != r.l.ctx {
		return newError(op, unix.EINVAL, "a QP of the listener's context is required")
	}
	if qp.closed.Load() {
		return closedError(op, "queue pair")
	}
	c := r.l.ctx
	var ev proto.CMEvent
	req := proto.AcceptRequest{Conn: r.id, QP: qp.handle, PrivateData: p.PrivateData, IRD: p.IRD, ORD: p.ORD}
	if err := c.call(proto.OpAccept, req, &ev); err != nil {
		return err
	}
	c.cm.mu.Lock()
	c.cm.qp(qp.handle).info.set(CMEvent{Peer: parseAddr(ev.Peer), Local: parseAddr(ev.Local), PrivateData: ev.PrivateData,
		IRD: ev.IRD, ORD: ev.ORD, MPA: ev.MPA})
	c.cm.mu.Unlock()
	return nil
}

// Reject refuses the request: the daemon sends an MPA Reply with the R bit
// and privateData (at most 512 octets), then closes the connection.
func (r *ConnRequest) Reject(privateData []byte) error {
	return r.l.ctx.call(proto.OpReject, proto.RejectRequest{Conn: r.id, PrivateData: privateData}, nil)
}

// Connect connects q (an RC QP in INIT) to the listener at addr and blocks
// until the connection is established (nil; q is in RTS) or failed:
// *RejectedError (errors.Is ErrRejected) when the peer rejected, an *Error
// wrapping unix.ECONNREFUSED / EHOSTUNREACH / ENETUNREACH when nothing
// listens or the host is unreachable, unix.ETIMEDOUT when the TCP connect or
// the MPA Reply took longer than p.Timeout, unix.EPROTO when MPA negotiation
// failed (the daemon sent the RFC's TERMINATE).
func (q *QP) Connect(addr netip.AddrPort, p ConnParam) error {
	const op = "connect"
	if q.closed.Load() {
		return closedError(op, "queue pair")
	}
	c := q.ctx
	w := make(chan CMEvent, 1)
	c.cm.mu.Lock()
	st := c.cm.qp(q.handle)
	if st.waiter != nil {
		c.cm.mu.Unlock()
		return newError(op, unix.EALREADY, "a Connect of this QP is in progress")
	}
	st.waiter = w
	c.cm.mu.Unlock()
	clear := func() {
		c.cm.mu.Lock()
		if st.waiter == w {
			st.waiter = nil
		}
		c.cm.mu.Unlock()
	}
	req := proto.ConnectRequest{QP: q.handle, Addr: addr.String(), PrivateData: p.PrivateData, IRD: p.IRD, ORD: p.ORD,
		MPA: p.MPA, TimeoutMs: uint32(min(p.Timeout.Milliseconds(), 1<<31))}
	if p.Timeout > 0 && req.TimeoutMs == 0 {
		req.TimeoutMs = 1
	}
	if err := c.call(proto.OpConnect, req, nil); err != nil {
		clear()
		return err
	}
	// The daemon always reports an outcome within its timeout (twice: TCP
	// connect, then the Reply); the guard only protects against a daemon bug.
	guard := 2*p.Timeout + 30*time.Second
	if p.Timeout <= 0 {
		guard = 2*time.Minute + 30*time.Second
	}
	t := time.NewTimer(guard)
	defer t.Stop()
	var ev CMEvent
	select {
	case ev = <-w:
	case <-c.done:
		clear()
		if err := c.sessionErr(op); err != nil {
			return err
		}
		return newError(op, unix.ENODEV, msgDaemonGone)
	case <-t.C:
		clear()
		c.call(proto.OpDisconnect, proto.DisconnectRequest{QP: q.handle, Abort: true}, nil)
		return newError(op, unix.ETIMEDOUT, "the daemon reported no outcome within %v", guard)
	}
	switch ev.Type {
	case CMEstablished:
		return nil
	case CMRejected:
		return &RejectedError{Peer: addr, PrivateData: ev.PrivateData}
	case CMTimedOut:
		return &Error{Op: op, Errno: unix.ETIMEDOUT, Msg: ev.Detail}
	}
	errno := ev.Errno
	if errno == 0 {
		errno = unix.EPROTO
	}
	return &Error{Op: op, Errno: errno, Msg: fmt.Sprintf("%v: %s", ev.Type, ev.Detail)}
}

// Disconnect ends q's connection gracefully: work already posted is
// finished, then the daemon closes its sending half (TCP FIN) and the QP
// goes to ERROR (what is still posted is flushed). A Connect in progress is
// cancelled. It returns at once; the end arrives as CMDisconnected on
// CMEvents. ENOTCONN if q is not connected.
func (q *QP) Disconnect() error { return q.disconnect(false) }

// Abort ends q's connection at once with a Terminate (RDMAP, catastrophic
// error) and moves the QP to ERROR; see Disconnect.
func (q *QP) Abort() error { return q.disconnect(true) }

func (q *QP) disconnect(abort bool) error {
	if q.closed.Load() {
		return closedError("disconnect", "queue pair")
	}
	return q.ctx.call(proto.OpDisconnect, proto.DisconnectRequest{QP: q.handle, Abort: abort}, nil)
}

// CMEvents returns q's connection events: CMEstablished (also after a
// successful Accept) and CMDisconnected (the peer closed, a Terminate, a
// socket error, or this side's Disconnect/Abort). Connect's own outcome is
// its return value, not an event. Events beyond 64 unread are dropped.
func (q *QP) CMEvents() <-chan CMEvent {
	q.ctx.cm.mu.Lock()
	defer q.ctx.cm.mu.Unlock()
	return q.ctx.cm.qp(q.handle).events
}

// ConnInfo returns what the connection negotiated (zero before Connect or
// Accept succeeded).
func (q *QP) ConnInfo() ConnInfo {
	q.ctx.cm.mu.Lock()
	defer q.ctx.cm.mu.Unlock()
	return q.ctx.cm.qp(q.handle).info
}

// DroppedCMEvents counts CM events lost to full queues (or undecodable).
func (c *Context) DroppedCMEvents() uint64 { return c.cm.dropped.Load() }
