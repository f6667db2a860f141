package e2e

import (
	"errors"
	"io"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/iwarpd/iwarpd/ddp"
	"github.com/iwarpd/iwarpd/internal/shm"
	"github.com/iwarpd/iwarpd/mpa"
	"github.com/iwarpd/iwarpd/proto"
	"github.com/iwarpd/iwarpd/rdmap"
	"github.com/iwarpd/iwarpd/verbsd"
	"github.com/iwarpd/iwarpd/verbsd/config"
	"github.com/iwarpd/iwarpd/verbsd/rc"
	"github.com/iwarpd/iwarpd/verbsd/verbsdtest"
	"golang.org/x/sys/unix"
)

// Test harness for the RC data path: RC QPs created through the control
// protocol, connected by hand (a loopback TCP pair and mpa.Params both
// sides agree on) through AttachRC, the CM's hand-off.

const rcWait = 20 * time.Second

// rcServer starts a server for RC tests (serve).
func rcServer(t testing.TB, mutate ...func(*config.Config)) (*verbsd.Server, string) {
	t.Helper()
	return serve(t, false, mutate...)
}

// rcEnd is one client with an RC QP (in INIT until attached).
type rcEnd struct {
	t        testing.TB
	srv      *verbsd.Server
	c        *verbsdtest.Client
	pd       uint32
	mr       *verbsdtest.MR
	scq, rcq *verbsdtest.CQ
	qp       uint32
	qpn      uint32
	sq, rq   *shm.Producer
	caps     proto.QPCaps

	mu     sync.Mutex
	closed []rc.CloseReason
	terms  []*rdmap.Terminate
}

var rcCaps = proto.QPCaps{MaxSendWR: 256, MaxRecvWR: 256, MaxSendSGE: 4, MaxRecvSGE: 4, MaxInline: 256}

type rcOpts struct {
	bufSize  int
	access   proto.Access
	srq      uint32 // use this SRQ (the client c must own it)
	c        *verbsdtest.Client
	pd       uint32
	mergeImm bool // create the QP with merge_send_imm (rc/imm.go)
	holdRecv bool // create the QP with hold_recv (rc/hold.go)
}

func newRCEnd(t testing.TB, srv *verbsd.Server, path string, o rcOpts) *rcEnd {
	t.Helper()
	if o.bufSize == 0 {
		o.bufSize = 1 << 20
	}
	if o.access == 0 {
		o.access = proto.AccessLocalWrite | proto.AccessRemoteWrite | proto.AccessRemoteRead
	}
	n := &rcEnd{t: t, srv: srv, caps: rcCaps, c: o.c}
	if n.c == nil {
		c, err := verbsdtest.Dial(path, false)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(c.Close)
		n.c = c
	}
	var err error
	n.pd = o.pd
	if n.pd == 0 {
		if n.pd, err = n.c.AllocPD(); err != nil {
			t.Fatal(err)
		}
	}
	if n.mr, err = n.c.RegMR(n.pd, o.bufSize, o.access); err != nil {
		t.Fatal(err)
	}
	if n.scq, err = n.c.CreateCQ(4096, 0); err != nil {
		t.Fatal(err)
	}
	if n.rcq, err = n.c.CreateCQ(4096, 0); err != nil {
		t.Fatal(err)
	}
	caps := n.caps
	if o.srq != 0 {
		caps.MaxRecvWR = 0
	}
	sqStride := proto.SQEStride(caps.MaxSendSGE, caps.MaxInline)
	sqBytes := proto.RingBytes(caps.MaxSendWR, sqStride)
	size := sqBytes
	if o.srq == 0 {
		size += proto.RingBytes(caps.MaxRecvWR, proto.RQEStride(caps.MaxRecvSGE))
	}
	reg, err := shm.Create("qp", size)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { reg.Close() })
	sq, err := shm.NewRing(reg.Mem[:sqBytes], proto.RingSQ, caps.MaxSendWR, sqStride, true)
	if err != nil {
		t.Fatal(err)
	}
	n.sq = shm.NewProducer(sq)
	if o.srq == 0 {
		rq, err := shm.NewRing(reg.Mem[sqBytes:], proto.RingRQ, caps.MaxRecvWR, proto.RQEStride(caps.MaxRecvSGE), true)
		if err != nil {
			t.Fatal(err)
		}
		n.rq = shm.NewProducer(rq)
	}
	var r proto.CreateQPReply
	req := proto.CreateQPRequest{PD: n.pd, Type: proto.QPTypeRC, SendCQ: n.scq.Handle, RecvCQ: n.rcq.Handle, SRQ: o.srq, Caps: caps,
		MergeSendImm: o.mergeImm, HoldRecv: o.holdRecv}
	if _, err := n.c.Call(proto.OpCreateQP, req, &r, reg.FD()); err != nil {
		t.Fatal(err)
	}
	n.qp, n.qpn = r.Handle, r.QPN
	n.modify(proto.QPStateInit)
	return n
}

func (n *rcEnd) modify(s proto.QPState) {
	n.t.Helper()
	if _, err := n.c.Call(proto.OpModifyQP, proto.ModifyQPRequest{QP: n.qp, State: s}, nil); err != nil {
		n.t.Fatal(err)
	}
}

func (n *rcEnd) state() proto.QPState {
	n.t.Helper()
	var r proto.QueryQPReply
	if _, err := n.c.Call(proto.OpQueryQP, proto.Handle{Handle: n.qp}, &r); err != nil {
		n.t.Fatal(err)
	}
	return r.State
}

func (n *rcEnd) waitState(want proto.QPState) {
	n.t.Helper()
	deadline := time.Now().Add(rcWait)
	for {
		s := n.state()
		if s == want {
			return
		}
		if time.Now().After(deadline) {
			n.t.Fatalf("QP %d: state %v, want %v", n.qp, s, want)
		}
		time.Sleep(time.Millisecond)
	}
}

// engineQP runs f on the engine with the daemon's qp.
func (n *rcEnd) engineQP(f func(q *rc.QP) error) error {
	return n.srv.Device().Engs[0].Do(func() error {
		s := n.srv.Device().Engs[0].Sessions[n.c.Hello.SessionID]
		if s == nil || s.QPs[n.qp] == nil || rc.QPOf(s.QPs[n.qp]) == nil {
			return errors.New("no such RC QP")
		}
		return f(rc.QPOf(s.QPs[n.qp]))
	})
}

// attach hands fd to the engine as the connection of n's QP.
func (n *rcEnd) attach(fd int, p mpa.Params, initiator bool, mss int) {
	n.t.Helper()
	err := n.engineQP(func(q *rc.QP) error {
		q.OnRCClosed = func(r rc.CloseReason, term *rdmap.Terminate) {
			n.mu.Lock()
			n.closed = append(n.closed, r)
			n.terms = append(n.terms, term)
			n.mu.Unlock()
		}
		return q.Engine.AttachRC(q, rc.Attach{FD: fd, Params: p, Initiator: initiator, MSS: mss})
	})
	if err != nil {
		unix.Close(fd)
		n.t.Fatal(err)
	}
}

func (n *rcEnd) closeReasons() ([]rc.CloseReason, []*rdmap.Terminate) {
	n.mu.Lock()
	defer n.mu.Unlock()
	return append([]rc.CloseReason(nil), n.closed...), append([]*rdmap.Terminate(nil), n.terms...)
}

func (n *rcEnd) waitClosed() (rc.CloseReason, *rdmap.Terminate) {
	n.t.Helper()
	deadline := time.Now().Add(rcWait)
	for time.Now().Before(deadline) {
		if r, terms := n.closeReasons(); len(r) > 0 {
			if len(r) > 1 {
				n.t.Errorf("onRCClosed called %d times: %v", len(r), r)
			}
			return r[0], terms[0]
		}
		time.Sleep(time.Millisecond)
	}
	n.t.Fatalf("QP %d: connection not closed", n.qp)
	return 0, nil
}

var errRingFull = errors.New("ring full")

func (n *rcEnd) trySend(e proto.SQE, sges []proto.SGE, inline []byte) error {
	slot, err := n.sq.Next()
	if err != nil {
		return err
	}
	if slot == nil {
		return errRingFull
	}
	if inline != nil {
		e.InlineLen = uint32(len(inline))
		e.Flags |= proto.SendInline
		copy(slot[proto.SQEHeaderLen:], inline)
	} else {
		e.NumSGE = uint16(len(sges))
	}
	e.Put(slot)
	for i, s := range sges {
		s.Put(slot[proto.SQEHeaderLen+i*proto.SGELen:])
	}
	n.sq.Publish()
	n.c.Doorbell()
	return nil
}

func (n *rcEnd) postSend(e proto.SQE, sges []proto.SGE, inline []byte) {
	n.t.Helper()
	if err := n.trySend(e, sges, inline); err != nil {
		n.t.Fatal(err)
	}
}

func (n *rcEnd) postRecvOn(p *shm.Producer, wrid uint64, sges ...proto.SGE) {
	n.t.Helper()
	if err := n.c.PostRecv(p, wrid, sges); err != nil {
		n.t.Fatal(err)
	}
}

func (n *rcEnd) postRecv(wrid uint64, sges ...proto.SGE) { n.postRecvOn(n.rq, wrid, sges...) }

func (n *rcEnd) waitCQEs(cq *verbsdtest.CQ, k int, what string) []proto.CQE {
	n.t.Helper()
	got := cq.Wait(k, rcWait)
	if len(got) != k {
		n.t.Fatalf("%s: %d completions, want %d: %+v", what, len(got), k, got)
	}
	return got
}

// noCQE checks that no completion arrives on cq for a moment.
func (n *rcEnd) noCQE(cq *verbsdtest.CQ, what string) {
	n.t.Helper()
	if got := cq.Wait(1, 50*time.Millisecond); len(got) != 0 {
		n.t.Fatalf("%s: unexpected completion %+v", what, got)
	}
}

func (n *rcEnd) counters() map[string]int64 {
	var m map[string]int64
	n.engineQP(func(q *rc.QP) error { m = q.Stats.Snapshot(); return nil })
	return m
}

// tcpPair returns two connected non-blocking TCP sockets (raw fds).
func tcpPair(t testing.TB) (int, int) {
	t.Helper()
	a, b := netPair(t)
	return fdOf(t, a), fdOf(t, b)
}

// netPair returns two connected loopback TCP connections.
func netPair(t testing.TB) (*net.TCPConn, *net.TCPConn) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	ch := make(chan net.Conn, 1)
	go func() {
		c, _ := ln.Accept()
		ch <- c
	}()
	a, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	b := <-ch
	if b == nil {
		t.Fatal("accept failed")
	}
	return a.(*net.TCPConn), b.(*net.TCPConn)
}

// fdOf takes a duplicate of c's socket, non-blocking, and closes c.
func fdOf(t testing.TB, c *net.TCPConn) int {
	t.Helper()
	raw, err := c.SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	fd := -1
	var derr error
	raw.Control(func(s uintptr) { fd, derr = unix.FcntlInt(s, unix.F_DUPFD_CLOEXEC, 0) })
	c.Close()
	if derr != nil {
		t.Fatal(derr)
	}
	if err := unix.SetNonblock(fd, true); err != nil {
		t.Fatal(err)
	}
	return fd
}

// rcParams returns matching parameters for the two ends.
func rcParams(crc, markers bool, ird, ord uint16) (init, resp mpa.Params) {
	init = mpa.Params{Revision: 2, Enhanced: true, CRC: crc, MarkersTx: markers, MarkersRx: markers,
		LocalIRD: ird, LocalORD: ord, PeerIRD: ird, PeerORD: ord}
	return init, init
}

// connectRC connects a (initiator) and b over loopback.
func connectRC(t testing.TB, a, b *rcEnd, pi, pr mpa.Params, mss int) {
	t.Helper()
	fa, fb := tcpPair(t)
	a.attach(fa, pi, true, mss)
	b.attach(fb, pr, false, mss)
}

// rawPeer is a hand-driven iWARP peer on a blocking loopback socket: it
// frames DDP segments with mpa.Sender and parses what the engine sends
// with mpa.ParseFPDU.
type rawPeer struct {
	t       testing.TB
	conn    *net.TCPConn
	snd     *mpa.Sender
	crc     bool
	markers bool // the engine inserts markers toward us
	in      []byte
	pos     uint64 // stream position of in[0]
	msn     [3]uint32
}

// connectRaw connects n's QP to a raw peer; the engine side is the
// responder unless initiator.
func connectRaw(t testing.TB, n *rcEnd, p mpa.Params, initiator bool, mss int) *rawPeer {
	t.Helper()
	a, b := netPair(t)
	n.attach(fdOf(t, a), p, initiator, mss)
	r := &rawPeer{t: t, conn: b, snd: mpa.NewSender(p.CRC, p.MarkersRx), crc: p.CRC, markers: p.MarkersTx}
	t.Cleanup(func() { b.Close() })
	return r
}

// fpdu returns the wire form of one FPDU carrying h and payload.
func (r *rawPeer) fpdu(h ddp.Header, payload ...[]byte) []byte {
	ulpdu := h.Append(nil)
	for _, p := range payload {
		ulpdu = append(ulpdu, p...)
	}
	return r.snd.AppendFPDU(nil, ulpdu)
}

func (r *rawPeer) write(b []byte) {
	r.t.Helper()
	r.conn.SetWriteDeadline(time.Now().Add(rcWait))
	if _, err := r.conn.Write(b); err != nil {
		r.t.Fatalf("raw peer write: %v", err)
	}
}

func (r *rawPeer) send(h ddp.Header, payload ...[]byte) []byte {
	r.t.Helper()
	b := r.fpdu(h, payload...)
	r.write(b)
	return b
}

// untagged is an untagged header for op on its queue with the next MSN.
func (r *rawPeer) untagged(op rdmap.Opcode, mo uint32, last bool) ddp.Header {
	info, _ := op.Info()
	r.msn[info.QN]++
	return ddp.Header{Version: ddp.Version, ULPControl: uint8(rdmap.MakeControl(op)), QN: info.QN, MSN: r.msn[info.QN], MO: mo, Last: last}
}

func tagged(op rdmap.Opcode, stag uint32, to uint64, last bool) ddp.Header {
	return ddp.Header{Tagged: true, Version: ddp.Version, ULPControl: uint8(rdmap.MakeControl(op)), Stag: stag, TO: to, Last: last}
}

// next reads the engine's next FPDU: its DDP header and the octets after it.
func (r *rawPeer) next() (ddp.Header, []byte, error) {
	buf := make([]byte, 256<<10)
	for {
		if len(r.in) > 0 {
			f, err := mpa.ParseFPDU(r.in, r.pos, r.crc, r.markers)
			if err == nil {
				if !f.CRCValid {
					return ddp.Header{}, nil, f.Err()
				}
				r.in = r.in[f.WireLen:]
				r.pos += uint64(f.WireLen)
				h, n, err := ddp.Parse(f.ULPDU)
				if err != nil {
					return h, nil, err
				}
				return h, f.ULPDU[n:], nil
			}
			if !errors.Is(err, mpa.ErrTruncated) {
				return ddp.Header{}, nil, err
			}
		}
		r.conn.SetReadDeadline(time.Now().Add(rcWait))
		n, err := r.conn.Read(buf)
		r.in = append(r.in, buf[:n]...)
		if err != nil {
			return ddp.Header{}, nil, err
		}
	}
}

// terminate reads FPDUs until the engine's Terminate and returns it.
func (r *rawPeer) terminate() (ddp.Header, rdmap.Terminate) {
	r.t.Helper()
	for {
		h, rest, err := r.next()
		if err != nil {
			r.t.Fatalf("raw peer: waiting for a Terminate: %v", err)
		}
		if h.Tagged || h.QN != rdmap.QNTerminate {
			continue
		}
		t, _, err := rdmap.ParseTerminate(rest)
		if err != nil {
			r.t.Fatalf("engine's Terminate does not parse: %v", err)
		}
		return h, t
	}
}

// expectEOF reads until the engine closes its side.
func (r *rawPeer) expectEOF() {
	r.t.Helper()
	for {
		_, _, err := r.next()
		if err != nil {
			if !errors.Is(err, io.EOF) {
				r.t.Fatalf("raw peer: %v, want EOF", err)
			}
			return
		}
	}
}
