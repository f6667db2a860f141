package verbsdtest

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net/netip"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/iwarpd/iwarpd/internal/shm"
	"github.com/iwarpd/iwarpd/proto"
	"golang.org/x/sys/unix"
)

// Client is one session.
type Client struct {
	Conn   *proto.Conn
	Hello  proto.HelloReply
	Bell   int         // the daemon's doorbell eventfd (-1 for inspect sessions)
	Status *shm.Region // the status page, read-only
	Events []proto.Event
	seq    uint32
}

// CallError is an error reply.
type CallError struct {
	Op    proto.Op
	Errno unix.Errno
	Msg   string
}

func (e *CallError) Error() string { return fmt.Sprintf("%v: %v: %s", e.Op, e.Errno, e.Msg) }
func (e *CallError) Unwrap() error { return e.Errno }

// Dial connects and says hello (inspect: a read-only session).
func Dial(path string, inspect bool) (*Client, error) {
	conn, err := proto.Dial(path)
	if err != nil {
		return nil, err
	}
	c := &Client{Conn: conn, Bell: -1}
	fds, err := c.Call(proto.OpHello, proto.HelloRequest{ABI: proto.ABIVersion, Client: "verbsdtest", Inspect: inspect}, &c.Hello)
	if err != nil {
		conn.Close()
		return nil, err
	}
	if !inspect {
		if len(fds) != 2 {
			conn.Close()
			return nil, fmt.Errorf("hello: got %d descriptors, want 2", len(fds))
		}
		c.Bell = fds[0]
		if c.Status, err = shm.Map(fds[1], proto.StatusPageLen, unix.PROT_READ); err != nil {
			conn.Close()
			return nil, err
		}
	}
	return c, nil
}

// Close closes the connection (no teardown: the daemon reclaims).
func (c *Client) Close() {
	c.Conn.Close()
	if c.Bell >= 0 {
		unix.Close(c.Bell)
	}
	c.Status.Close()
}

// Raw sends one request with an explicit header and returns the reply
// header and a copy of its body.
func (c *Client) Raw(h proto.Header, body any, fds ...int) (proto.Header, []byte, []int, error) {
	if err := c.Conn.Send(h, body, fds...); err != nil {
		return proto.Header{}, nil, nil, err
	}
	return c.receiveReply()
}

// RawBytes sends arbitrary bytes as one message and returns the reply.
func (c *Client) RawBytes(b []byte) (proto.Header, []byte, []int, error) {
	if _, _, err := c.Conn.UnixConn().WriteMsgUnix(b, nil, nil); err != nil {
		return proto.Header{}, nil, nil, err
	}
	return c.receiveReply()
}

func (c *Client) receiveReply() (proto.Header, []byte, []int, error) {
	c.Conn.UnixConn().SetReadDeadline(time.Now().Add(20 * time.Second))
	defer c.Conn.UnixConn().SetReadDeadline(time.Time{})
	for {
		h, body, fds, err := c.Conn.Receive()
		if err != nil {
			return h, nil, fds, err
		}
		if h.Op == proto.OpEvent {
			var ev proto.Event
			if proto.Unmarshal(body, &ev) == nil {
				c.Events = append(c.Events, ev)
			}
			continue
		}
		return h, append([]byte(nil), body...), fds, nil
	}
}

// Call sends a request and decodes the reply into reply (may be nil); an
// error reply is a *CallError. It returns the reply's descriptors.
func (c *Client) Call(op proto.Op, req, reply any, fds ...int) ([]int, error) {
	c.seq++
	h, body, rfds, err := c.Raw(proto.Header{Version: proto.ABIVersion, Op: op, Seq: c.seq}, req, fds...)
	if err != nil {
		return rfds, err
	}
	if h.Op != op|proto.OpReply || h.Seq != c.seq {
		return rfds, fmt.Errorf("reply %v seq %d to %v seq %d", h.Op, h.Seq, op, c.seq)
	}
	if h.Status != 0 {
		var eb proto.ErrorBody
		proto.Unmarshal(body, &eb)
		return rfds, &CallError{Op: op, Errno: h.Status, Msg: eb.Error}
	}
	if reply != nil {
		if err := proto.Unmarshal(body, reply); err != nil {
			return rfds, err
		}
	}
	return rfds, nil
}

// Asleep reads the status page's Asleep word.
func (c *Client) Asleep() uint32 {
	return (*atomic.Uint32)(unsafe.Pointer(&c.Status.Mem[proto.OffStatusAsleep])).Load()
}

// Doorbell wakes the engine if it said it sleeps (call after publishing).
func (c *Client) Doorbell() {
	if c.Asleep() == 1 {
		unix.Write(c.Bell, bellOne[:])
	}
}

// bellOne is the eventfd increment a doorbell writes (read-only: a buffer
// of its own per call escaped to the heap under the race detector, and the
// zero-allocation tests count the test client's allocations too).
var bellOne = func() (b [8]byte) { binary.NativeEndian.PutUint64(b[:], 1); return b }()

// AllocPD allocates a protection domain.
func (c *Client) AllocPD() (uint32, error) {
	var h proto.Handle
	_, err := c.Call(proto.OpAllocPD, nil, &h)
	return h.Handle, err
}

// MR is a registered buffer.
type MR struct {
	Region *shm.Region
	Buf    []byte
	Handle uint32
	LKey   uint32
	RKey   uint32 // the STag remote peers name it by (never LKey)
}

// Addr returns the client address of Buf[off].
func (m *MR) Addr(off int) uint64 { return uint64(uintptr(unsafe.Pointer(&m.Buf[0]))) + uint64(off) }

// SGE returns an SGE for Buf[off:off+n].
func (m *MR) SGE(off, n int) proto.SGE {
	return proto.SGE{Addr: m.Addr(off), Length: uint32(n), LKey: m.LKey}
}

// RegMR creates a region of size octets and registers all of it.
func (c *Client) RegMR(pd uint32, size int, access proto.Access) (*MR, error) {
	reg, err := shm.Create("mr", size)
	if err != nil {
		return nil, err
	}
	m := &MR{Region: reg, Buf: reg.Mem[:size]}
	var r proto.RegMRReply
	if _, err := c.Call(proto.OpRegMR, proto.RegMRRequest{PD: pd, Length: uint64(size), Addr: m.Addr(0), Access: access}, &r, reg.FD()); err != nil {
		reg.Close()
		return nil, err
	}
	m.Handle, m.LKey, m.RKey = r.Handle, r.LKey, r.RKey
	return m, nil
}

// CQ is a completion queue.
type CQ struct {
	Handle uint32
	Region *shm.Region
	Ring   *shm.Ring
	cons   *shm.Consumer
}

// CreateCQ creates a CQ of depth entries (bound to channel if not 0).
func (c *Client) CreateCQ(depth, channel uint32) (*CQ, error) {
	reg, err := shm.Create("cq", proto.RingBytes(depth, proto.CQESize))
	if err != nil {
		return nil, err
	}
	ring, err := shm.NewRing(reg.Mem, proto.RingCQ, depth, proto.CQESize, true)
	if err != nil {
		reg.Close()
		return nil, err
	}
	var h proto.Handle
	if _, err := c.Call(proto.OpCreateCQ, proto.CreateCQRequest{Depth: depth, Channel: channel}, &h, reg.FD()); err != nil {
		reg.Close()
		return nil, err
	}
	return &CQ{Handle: h.Handle, Region: reg, Ring: ring, cons: shm.NewConsumer(ring)}, nil
}

// Poll returns the completions available now.
func (q *CQ) Poll() []proto.CQE {
	var out []proto.CQE
	for {
		slot, err := q.cons.Peek()
		if err != nil || slot == nil {
			break
		}
		var e proto.CQE
		proto.GetCQE(slot, &e)
		out = append(out, e)
		q.cons.Advance()
	}
	q.cons.Release()
	return out
}

// PollInto copies the completions available now, at most len(out), into
// out and returns how many; it never allocates (the zero-allocation tests
// of the data path poll with it).
func (q *CQ) PollInto(out []proto.CQE) int {
	n := 0
	for n < len(out) {
		slot, err := q.cons.Peek()
		if err != nil || slot == nil {
			break
		}
		proto.GetCQE(slot, &out[n])
		n++
		q.cons.Advance()
	}
	q.cons.Release()
	return n
}

// Wait polls until n completions arrived or timeout passed.
func (q *CQ) Wait(n int, timeout time.Duration) []proto.CQE {
	var out []proto.CQE
	deadline := time.Now().Add(timeout)
	for len(out) < n && time.Now().Before(deadline) {
		got := q.Poll()
		out = append(out, got...)
		if len(got) == 0 {
			time.Sleep(20 * time.Microsecond)
		}
	}
	return out
}

// QP is a queue pair with its rings.
type QP struct {
	Handle uint32
	QPN    uint32
	Addr   string
	QKey   uint32 // a datagram QP's Q_Key (TestQKey unless QPOptions says otherwise)
	// PeerQKey is put in every SQE posted with QKey 0 (TestQKey by
	// default; set it to 0 to post datagram work requests without a key).
	PeerQKey uint32
	Caps     proto.QPCaps
	Region   *shm.Region
	SQ       *shm.Producer
	RQ       *shm.Producer
	c        *Client
}

// QPOptions are the optional parts of CreateQPRequest.
type QPOptions struct {
	SRQ    uint32
	Port   uint16
	NoCRC  bool
	SigAll bool
	Type   proto.QPType // 0: UD
	// QKey of a datagram QP: 0 is TestQKey (so that the QPs of a test talk
	// to each other as before Q_Keys), RandomQKey lets the daemon draw one.
	QKey uint32
	// Socket, when HasSocket, is passed as the QP's own UDP socket
	// (CreateQPRequest.Socket, descriptor 1; Port names its reserved port:
	// ReservePort). verbsdtest does not close it.
	Socket    int
	HasSocket bool
	// QuietRecords: proto.CreateQPRequest.QuietRecords (RD only).
	QuietRecords bool
}

// ReservePort reserves a port for a client-made socket of a QP of type
// typ (reserve-port) and returns the address to bind.
func (c *Client) ReservePort(typ proto.QPType, port uint16) (string, error) {
	var r proto.ReservePortReply
	_, err := c.Call(proto.OpReservePort, proto.ReservePortRequest{Type: typ, Port: port}, &r)
	return r.Addr, err
}

// TestQKey is the Q_Key verbsdtest gives datagram QPs unless told
// otherwise: a well-known key, for tests only (a real client keeps the
// daemon's random key, or one its application agreed on).
const TestQKey uint32 = 0x7e57_0001

// RandomQKey in QPOptions.QKey asks the daemon for a random Q_Key.
const RandomQKey uint32 = 0xffff_ffff

// CreateQP creates a UD QP (rings initialized here).
func (c *Client) CreateQP(pd uint32, scq, rcq *CQ, caps proto.QPCaps, o QPOptions) (*QP, error) {
	sqStride := proto.SQEStride(caps.MaxSendSGE, caps.MaxInline)
	rqStride := proto.RQEStride(caps.MaxRecvSGE)
	sqBytes := proto.RingBytes(caps.MaxSendWR, sqStride)
	size := sqBytes
	if o.SRQ == 0 {
		size += proto.RingBytes(caps.MaxRecvWR, rqStride)
	}
	reg, err := shm.Create("qp", size)
	if err != nil {
		return nil, err
	}
	q := &QP{Region: reg, Caps: caps, c: c}
	sq, err := shm.NewRing(reg.Mem[:sqBytes], proto.RingSQ, caps.MaxSendWR, sqStride, true)
	if err != nil {
		reg.Close()
		return nil, err
	}
	q.SQ = shm.NewProducer(sq)
	if o.SRQ == 0 {
		rq, err := shm.NewRing(reg.Mem[sqBytes:], proto.RingRQ, caps.MaxRecvWR, rqStride, true)
		if err != nil {
			reg.Close()
			return nil, err
		}
		q.RQ = shm.NewProducer(rq)
	}
	var r proto.CreateQPReply
	typ := o.Type
	if typ == 0 {
		typ = proto.QPTypeUD
	}
	qkey := o.QKey
	switch {
	case typ == proto.QPTypeRC:
		qkey = 0
	case qkey == 0:
		qkey = TestQKey
	case qkey == RandomQKey:
		qkey = 0
	}
	req := proto.CreateQPRequest{PD: pd, Type: typ, SendCQ: scq.Handle, RecvCQ: rcq.Handle, SRQ: o.SRQ, Caps: caps,
		SigAll: o.SigAll, Port: o.Port, NoCRC: o.NoCRC, QKey: qkey, Socket: o.HasSocket,
		QuietRecords: o.QuietRecords}
	fds := []int{reg.FD()}
	if o.HasSocket {
		fds = append(fds, o.Socket)
	}
	if _, err := c.Call(proto.OpCreateQP, req, &r, fds...); err != nil {
		reg.Close()
		return nil, err
	}
	q.Handle, q.QPN, q.Addr, q.QKey = r.Handle, r.QPN, r.Addr, r.QKey
	if typ != proto.QPTypeRC {
		q.PeerQKey = TestQKey
	}
	return q, nil
}

// Modify moves the QP to state.
func (q *QP) Modify(state proto.QPState) error {
	_, err := q.c.Call(proto.OpModifyQP, proto.ModifyQPRequest{QP: q.Handle, State: state}, nil)
	return err
}

// ToRTS moves a new QP RESET→INIT→RTR→RTS.
func (q *QP) ToRTS() error {
	for _, s := range []proto.QPState{proto.QPStateInit, proto.QPStateRTR, proto.QPStateRTS} {
		if err := q.Modify(s); err != nil {
			return err
		}
	}
	return nil
}

// ErrFull means the ring has no free slot.
var ErrFull = errors.New("verbsdtest: ring full")

// PostSend writes an SQE with its SGEs (or inline data) and publishes it.
func (q *QP) PostSend(e proto.SQE, sges []proto.SGE, inline []byte) error {
	slot, err := q.SQ.Next()
	if err != nil {
		return err
	}
	if slot == nil {
		return ErrFull
	}
	if inline != nil {
		e.InlineLen = uint32(len(inline))
		copy(slot[proto.SQEHeaderLen:], inline)
	} else if e.NumSGE == 0 {
		e.NumSGE = uint16(len(sges))
	}
	if e.QKey == 0 {
		e.QKey = q.PeerQKey
	}
	e.Put(slot)
	for i, s := range sges {
		off := proto.SQEHeaderLen + i*proto.SGELen
		if off+proto.SGELen > len(slot) {
			break
		}
		s.Put(slot[off:])
	}
	q.SQ.Publish()
	q.c.Doorbell()
	return nil
}

// PostRecv writes an RQE into p (a QP's RQ or an SRQ) and publishes it.
func (c *Client) PostRecv(p *shm.Producer, wrid uint64, sges []proto.SGE) error {
	slot, err := p.Next()
	if err != nil {
		return err
	}
	if slot == nil {
		return ErrFull
	}
	e := proto.RQE{WRID: wrid, NumSGE: uint16(len(sges))}
	e.Put(slot)
	for i, s := range sges {
		off := proto.RQEHeaderLen + i*proto.SGELen
		if off+proto.SGELen > len(slot) {
			break
		}
		s.Put(slot[off:])
	}
	p.Publish()
	c.Doorbell()
	return nil
}

// CreateAH returns the address vector of addr (ip:port) to put in a
// datagram SQE (proto.SQE.AH). Since ABI 2 an address handle is the
// client's alone: nothing is asked of the daemon, and pd (the protection
// domain ofverbs checks an AH against) is not used here, so a test can
// send any vector.
func (c *Client) CreateAH(pd uint32, addr string) (proto.AddressVector, error) {
	ap, err := netip.ParseAddrPort(addr)
	if err != nil || ap.Port() == 0 {
		return proto.AddressVector{}, fmt.Errorf("verbsdtest: create-ah (pd %d): address %q: want ip:port", pd, addr)
	}
	return proto.AddressVectorOf(ap), nil
}

// Inspect fetches the daemon's state, following OpInspect's pages
// (proto.InspectRequest) and joining sessions split across them.
func (c *Client) Inspect() (proto.Inspect, error) {
	var in proto.Inspect
	var cur proto.InspectCursor
	for pages := 0; pages < 1<<16; pages++ {
		var page proto.Inspect
		if _, err := c.Call(proto.OpInspect, proto.InspectRequest{Cursor: cur}, &page); err != nil {
			return in, err
		}
		sessions := in.Sessions
		for _, s := range page.Sessions {
			if n := len(sessions); n > 0 && sessions[n-1].ID == s.ID {
				sessions[n-1].MRs = append(sessions[n-1].MRs, s.MRs...)
				sessions[n-1].CQs = append(sessions[n-1].CQs, s.CQs...)
				sessions[n-1].QPs = append(sessions[n-1].QPs, s.QPs...)
				continue
			}
			sessions = append(sessions, s)
		}
		in, in.Sessions = page, sessions
		if !page.More {
			in.Next = nil
			return in, nil
		}
		if page.Next == nil || *page.Next == cur {
			return in, fmt.Errorf("verbsdtest: inspect page %d: more follows but the cursor does not move (%+v)", pages, page.Next)
		}
		cur = *page.Next
	}
	return in, fmt.Errorf("verbsdtest: inspect: no end after %d pages", 1<<16)
}
