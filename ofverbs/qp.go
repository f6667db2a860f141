package ofverbs

import (
	"fmt"
	"net/netip"
	"sync"
	"sync/atomic"

	"github.com/iwarpd/iwarpd/internal/shm"
	"github.com/iwarpd/iwarpd/proto"
	"golang.org/x/sys/unix"
)

// QPInitAttr describes a QP to create.
type QPInitAttr struct {
	Type   QPType
	SendCQ *CQ
	RecvCQ *CQ
	SRQ    *SRQ // receives come from this SRQ (Cap.MaxRecvWR is then ignored)
	// Cap sizes the queues; work-request counts are rounded up to powers
	// of two (at least 1). Limits: QueryDevice.
	Cap    QPCap
	SigAll bool // every send completes, whatever SendWR.Signaled says
	// Port asks for this UDP port for a datagram QP (0: any in the
	// daemon's range).
	Port  uint16
	NoCRC bool // datagram QPs: no CRC (agreed with the peers out of band)
	// QKey is a datagram QP's Q_Key (docs/wire-format.md §5.1): the daemon
	// drops, silently and counted, every datagram that does not name it.
	// 0 (the default, and the one to keep) lets the daemon draw a random
	// key; peers learn it with the QP's address, from Endpoint. Choose one
	// only to share it, as every member of a multicast group must.
	QKey uint32
	// MergeSendImm (RC only) makes a Send with Immediate take ONE receive
	// at the target, which completes with the data, its length, WCFlagImm
	// and the value: the QP sends the RFC 7306 Immediate Data message
	// first (marked in its octets 4–7), then the Send, and folds a marked
	// Immediate Data it receives into the next Send's completion. Both
	// ends must set it. false (the default): RFC 7306 as is, two receives
	// (the Send's, then the Immediate Data's). docs/atomics.md "Send with
	// Immediate, merged".
	MergeSendImm bool
	// HoldRecv (RC only) makes the daemon keep an untagged message that
	// arrives before a receive is posted (bounded per QP; past the bound
	// the QP is terminated) and complete it on the receives posted next,
	// in order, instead of RFC 5040's Terminate "no buffer". Only the
	// receiving side's setting matters; the wire is unchanged. false (the
	// default): RFC 5040 as is. docs/iwarpd.md "RC receive hold".
	HoldRecv bool
	// QuietRecords (RD only) makes a Write-Record this QP receives take
	// no receive and complete nothing here (it is placed and acknowledged
	// as usual; a Write-Record with Immediate still takes one). For a
	// client that never reads the records. false (the default): every
	// record takes a receive. docs/write-record.md "Quiet records".
	QuietRecords bool
}

// QPAttr is a QP's state. Modify uses State, and QKey when it is not 0
// (a datagram QP's new Q_Key, as IBV_QP_QKEY); Query fills every field.
type QPAttr struct {
	State QPState
	Type  QPType
	QPN   uint32
	Addr  netip.AddrPort
	Cap   QPCap
	QKey  uint32
}

// QP is a queue pair. Its send and receive queues are rings in shared
// memory; posting is safe from several goroutines.
type QP struct {
	ctx    *Context
	pd     *PD
	handle uint32
	qpn    uint32
	typ    QPType
	addr   netip.AddrPort
	qkey   atomic.Uint32 // a datagram QP's Q_Key
	cap    QPCap
	sendCQ *CQ
	recvCQ *CQ
	srq    *SRQ
	region *shm.Region
	sq     sendQueue
	rq     *recvQueue // nil with an SRQ

	closeMu sync.Mutex
	closed  atomic.Bool
}

// CreateQP creates a queue pair in the RESET state. A datagram QP is bound
// to its UDP port at once: Addr is known before any Modify.
func (pd *PD) CreateQP(attr QPInitAttr) (*QP, error) {
	const op = "create-qp"
	if err := pd.check(op); err != nil {
		return nil, err
	}
	c := pd.ctx
	if attr.SendCQ == nil || attr.RecvCQ == nil || attr.SendCQ.ctx != c || attr.RecvCQ.ctx != c {
		return nil, newError(op, unix.EINVAL, "a send CQ and a receive CQ of this context are required")
	}
	if attr.SendCQ.closed.Load() || attr.RecvCQ.closed.Load() {
		return nil, closedError(op, "completion queue")
	}
	if attr.SRQ != nil && (attr.SRQ.ctx != c || attr.SRQ.closed.Load()) {
		return nil, newError(op, unix.EINVAL, "shared receive queue closed or of another context")
	}
	caps := attr.Cap
	sqDepth, ok := roundDepth(max(int(caps.MaxSendWR), 1))
	if !ok {
		return nil, newError(op, unix.EINVAL, "max_send_wr %d (want at most %d)", caps.MaxSendWR, proto.MaxDepth)
	}
	caps.MaxSendWR = sqDepth
	sqStride := proto.SQEStride(caps.MaxSendSGE, caps.MaxInline)
	size := proto.RingBytes(sqDepth, sqStride)
	sqBytes := size
	var rqDepth, rqStride uint32
	if attr.SRQ != nil {
		caps.MaxRecvWR, caps.MaxRecvSGE = 0, 0
	} else {
		if rqDepth, ok = roundDepth(max(int(caps.MaxRecvWR), 1)); !ok {
			return nil, newError(op, unix.EINVAL, "max_recv_wr %d (want at most %d)", caps.MaxRecvWR, proto.MaxDepth)
		}
		caps.MaxRecvWR = rqDepth
		rqStride = proto.RQEStride(caps.MaxRecvSGE)
		size += proto.RingBytes(rqDepth, rqStride)
	}
	if caps.MaxSendSGE > 1<<16-1 || caps.MaxRecvSGE > 1<<16-1 || caps.MaxInline > 1<<20 {
		return nil, newError(op, unix.EINVAL, "capabilities %+v too large", caps)
	}
	reg, err := shm.Create("qp", size)
	if err != nil {
		return nil, &Error{Op: op, Errno: errnoOf(err, unix.ENOMEM), Msg: err.Error()}
	}
	sqRing, err := shm.NewRing(reg.Mem[:sqBytes], proto.RingSQ, sqDepth, sqStride, true)
	if err != nil {
		reg.Close()
		return nil, &Error{Op: op, Errno: unix.EINVAL, Msg: err.Error()}
	}
	q := &QP{ctx: c, pd: pd, typ: attr.Type, cap: caps, sendCQ: attr.SendCQ, recvCQ: attr.RecvCQ, srq: attr.SRQ, region: reg}
	q.sq = sendQueue{qp: q, prod: shm.NewProducer(sqRing), depth: sqDepth}
	req := proto.CreateQPRequest{PD: pd.handle, Type: attr.Type, SendCQ: attr.SendCQ.handle, RecvCQ: attr.RecvCQ.handle,
		Caps: caps, SigAll: attr.SigAll, Port: attr.Port, NoCRC: attr.NoCRC, QKey: attr.QKey,
		MergeSendImm: attr.MergeSendImm, HoldRecv: attr.HoldRecv, QuietRecords: attr.QuietRecords}
	if attr.SRQ != nil {
		req.SRQ = attr.SRQ.handle
	} else {
		rqRing, err := shm.NewRing(reg.Mem[sqBytes:], proto.RingRQ, rqDepth, rqStride, true)
		if err != nil {
			reg.Close()
			return nil, &Error{Op: op, Errno: unix.EINVAL, Msg: err.Error()}
		}
		q.rq = &recvQueue{ctx: c, prod: shm.NewProducer(rqRing), depth: rqDepth, maxSGE: caps.MaxRecvSGE, what: "receive queue"}
	}
	fds := []int{reg.FD()}
	if c.clientSockets && attr.Type != proto.QPTypeRC { // qpsock.go
		sock, ap, err := c.qpSocket(attr.Type, attr.Port)
		if err != nil {
			reg.Close()
			return nil, err
		}
		defer unix.Close(sock) // the daemon has its copy; this process needs none
		req.Socket, req.Port = true, ap.Port()
		fds = append(fds, sock)
	}
	var rep proto.CreateQPReply
	if err := c.call(proto.OpCreateQP, req, &rep, fds...); err != nil {
		reg.Close()
		return nil, err
	}
	q.handle, q.qpn = rep.Handle, rep.QPN
	q.qkey.Store(rep.QKey)
	if rep.Addr != "" {
		if q.addr, err = netip.ParseAddrPort(rep.Addr); err != nil {
			// The QP exists in the daemon: keep it usable, address unknown.
			q.addr = netip.AddrPort{}
		}
	}
	c.mu.Lock()
	c.qps[q.handle] = q
	c.mu.Unlock()
	return q, nil
}

// QPN returns the QP number.
func (q *QP) QPN() uint32 { return q.qpn }

// Handle returns the daemon's handle of the QP.
func (q *QP) Handle() uint32 { return q.handle }

// Type returns the QP's transport type.
func (q *QP) Type() QPType { return q.typ }

// Addr returns a datagram QP's UDP address (ip:port), which remote peers
// use in CreateAH.
func (q *QP) Addr() netip.AddrPort { return q.addr }

// QKey returns a datagram QP's Q_Key (0 for RC).
func (q *QP) QKey() uint32 { return q.qkey.Load() }

// Endpoint returns what a peer needs to send to this datagram QP: its
// address and Q_Key. Give it to peers out of band (Endpoint.String and
// ParseEndpoint make it text), as an InfiniBand application gives its
// QPN; they call PD.CreateAHTo with it.
func (q *QP) Endpoint() Endpoint { return Endpoint{Addr: q.addr, QKey: q.qkey.Load()} }

// Cap returns the queue sizes in effect (after rounding).
func (q *QP) Cap() QPCap { return q.cap }

func (q *QP) String() string { return fmt.Sprintf("qp(%d %v %v)", q.qpn, q.typ, q.addr) }

// Modify moves the QP to attr.State: RESET→INIT→RTR→RTS, any→ERROR (which
// flushes every posted work request), ERROR→RESET.
func (q *QP) Modify(attr QPAttr) error {
	if q.closed.Load() {
		return closedError("modify-qp", "queue pair")
	}
	if err := q.ctx.call(proto.OpModifyQP, proto.ModifyQPRequest{QP: q.handle, State: attr.State, QKey: attr.QKey}, nil); err != nil {
		return err
	}
	if attr.QKey != 0 {
		q.qkey.Store(attr.QKey)
	}
	return nil
}

// ModifyState is Modify(QPAttr{State: s}) for each state in turn, e.g.
// ModifyState(QPStateInit, QPStateRTR, QPStateRTS).
func (q *QP) ModifyState(states ...QPState) error {
	for _, s := range states {
		if err := q.Modify(QPAttr{State: s}); err != nil {
			return err
		}
	}
	return nil
}

// Query returns the QP's current attributes.
func (q *QP) Query() (QPAttr, error) {
	if q.closed.Load() {
		return QPAttr{}, closedError("query-qp", "queue pair")
	}
	var rep proto.QueryQPReply
	if err := q.ctx.call(proto.OpQueryQP, proto.Handle{Handle: q.handle}, &rep); err != nil {
		return QPAttr{}, err
	}
	a := QPAttr{State: rep.State, Type: rep.Type, QPN: rep.QPN, Cap: rep.Caps, QKey: rep.QKey}
	if rep.Addr != "" {
		if ap, err := netip.ParseAddrPort(rep.Addr); err == nil {
			a.Addr = ap
		}
	}
	return a, nil
}

// Close destroys the QP; work requests still posted are discarded. Idempotent.
func (q *QP) Close() error {
	q.closeMu.Lock()
	defer q.closeMu.Unlock()
	if q.closed.Load() {
		return nil
	}
	if err := q.ctx.destroy(proto.OpDestroyQP, q.handle); err != nil {
		return err
	}
	q.ctx.mu.Lock()
	delete(q.ctx.qps, q.handle)
	q.ctx.mu.Unlock()
	q.release()
	return nil
}

func (q *QP) release() {
	q.closed.Store(true)
	q.sq.mu.Lock()
	q.sq.prod = nil
	q.sq.mu.Unlock()
	if q.rq != nil {
		q.rq.mu.Lock()
		q.rq.prod = nil
		q.rq.mu.Unlock()
	}
	q.sq.mu.Lock() // the region goes once no poster can hold a slot of it
	if q.region != nil {
		q.region.Close()
		q.region = nil
	}
	q.sq.mu.Unlock()
}

// SRQInitAttr describes a shared receive queue.
type SRQInitAttr struct {
	MaxWR  uint32 // rounded up to a power of two
	MaxSGE uint32
	Limit  uint32 // EventSRQLimit when fewer entries remain (0: off)
}

// SRQ is a shared receive queue: receive buffers for many QPs.
type SRQ struct {
	ctx    *Context
	handle uint32
	region *shm.Region
	rq     recvQueue

	closeMu sync.Mutex
	closed  atomic.Bool
}

// CreateSRQ creates a shared receive queue.
func (pd *PD) CreateSRQ(attr SRQInitAttr) (*SRQ, error) {
	const op = "create-srq"
	if err := pd.check(op); err != nil {
		return nil, err
	}
	depth, ok := roundDepth(max(int(attr.MaxWR), 1))
	if !ok {
		return nil, newError(op, unix.EINVAL, "max_wr %d (want at most %d)", attr.MaxWR, proto.MaxDepth)
	}
	if attr.MaxSGE > 1<<16-1 {
		return nil, newError(op, unix.EINVAL, "max_sge %d", attr.MaxSGE)
	}
	stride := proto.RQEStride(attr.MaxSGE)
	reg, err := shm.Create("srq", proto.RingBytes(depth, stride))
	if err != nil {
		return nil, &Error{Op: op, Errno: errnoOf(err, unix.ENOMEM), Msg: err.Error()}
	}
	ring, err := shm.NewRing(reg.Mem, proto.RingSRQ, depth, stride, true)
	if err != nil {
		reg.Close()
		return nil, &Error{Op: op, Errno: unix.EINVAL, Msg: err.Error()}
	}
	var h proto.Handle
	req := proto.CreateSRQRequest{PD: pd.handle, MaxWR: depth, MaxSGE: attr.MaxSGE, Limit: attr.Limit}
	if err := pd.ctx.call(proto.OpCreateSRQ, req, &h, reg.FD()); err != nil {
		reg.Close()
		return nil, err
	}
	s := &SRQ{ctx: pd.ctx, handle: h.Handle, region: reg}
	s.rq = recvQueue{ctx: pd.ctx, prod: shm.NewProducer(ring), depth: depth, maxSGE: attr.MaxSGE, what: "shared receive queue"}
	pd.ctx.mu.Lock()
	pd.ctx.srqs[s.handle] = s
	pd.ctx.mu.Unlock()
	return s, nil
}

// Handle returns the daemon's handle of the SRQ.
func (s *SRQ) Handle() uint32 { return s.handle }

// PostRecv posts receive buffers to the SRQ; see QP.PostRecv.
func (s *SRQ) PostRecv(wrs []RecvWR) (int, error) { return s.rq.post(wrs, "post-srq-recv") }

// Close destroys the SRQ (the daemon refuses with EBUSY while QPs use it).
// Idempotent.
func (s *SRQ) Close() error {
	s.closeMu.Lock()
	defer s.closeMu.Unlock()
	if s.closed.Load() {
		return nil
	}
	if err := s.ctx.destroy(proto.OpDestroySRQ, s.handle); err != nil {
		return err
	}
	s.ctx.mu.Lock()
	delete(s.ctx.srqs, s.handle)
	s.ctx.mu.Unlock()
	s.release()
	return nil
}

func (s *SRQ) release() {
	s.closed.Store(true)
	s.rq.mu.Lock()
	defer s.rq.mu.Unlock()
	s.rq.prod = nil
	if s.region != nil {
		s.region.Close()
		s.region = nil
	}
}
