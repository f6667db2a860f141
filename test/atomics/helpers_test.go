package atomics

import (
	"encoding/binary"
	"fmt"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/iwarpd/iwarpd/ofverbs"
	"github.com/iwarpd/iwarpd/test/daemontest"
)

var errTimeout = fmt.Errorf("timed out")

const accessAll = ofverbs.AccessLocalWrite | ofverbs.AccessRemoteWrite | ofverbs.AccessRemoteRead | ofverbs.AccessRemoteAtomic

// ep is a QP with one registered buffer of bufLen octets and its CQs.
type ep struct {
	name     string
	ctx      *ofverbs.Context
	pd       *ofverbs.PD
	mem      []byte
	mr       *ofverbs.MR
	scq, rcq *ofverbs.CQ
	qp       *ofverbs.QP
	wcs      [16]ofverbs.WC
}

const bufLen = 1 << 16

// newEP opens a session on d and creates a QP of typ with a buffer
// registered with access; opts may change the QP's attributes.
func newEP(t *testing.T, d *daemontest.Daemon, name string, typ ofverbs.QPType, access ofverbs.Access, opts ...func(*ofverbs.QPInitAttr)) *ep {
	t.Helper()
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
	}
	e := &ep{name: name, ctx: d.Open(t, name)}
	var err error
	e.pd, err = e.ctx.AllocPD()
	must(err)
	buf, err := e.ctx.AllocBuffer(bufLen)
	must(err)
	e.mem = buf.Bytes()
	e.mr, err = e.pd.RegMR(e.mem, access)
	must(err)
	e.scq, err = e.ctx.CreateCQ(256, nil)
	must(err)
	e.rcq, err = e.ctx.CreateCQ(256, nil)
	must(err)
	attr := ofverbs.QPInitAttr{Type: typ, SendCQ: e.scq, RecvCQ: e.rcq,
		Cap: ofverbs.QPCap{MaxSendWR: 64, MaxRecvWR: 64, MaxSendSGE: 1, MaxRecvSGE: 1, MaxInline: 64}}
	for _, o := range opts {
		o(&attr)
	}
	e.qp, err = e.pd.CreateQP(attr)
	must(err)
	must(e.qp.ModifyState(ofverbs.QPStateInit))
	if typ != ofverbs.QPTypeRC {
		must(e.qp.ModifyState(ofverbs.QPStateRTR))
		must(e.qp.ModifyState(ofverbs.QPStateRTS))
	}
	return e
}

// word returns the 8 octets at off of e's buffer, as the CPU sees them.
func (e *ep) word(off int) uint64 { return binary.NativeEndian.Uint64(e.mem[off:]) }

// addr is the address of e's buffer octet off.
func (e *ep) addr(off int) uint64 { return e.mr.Addr() + uint64(off) }

// poll waits (bounded) for completions of cq; it returns at least one.
func (e *ep) poll(cq *ofverbs.CQ, timeout time.Duration) ([]ofverbs.WC, error) {
	deadline := time.Now().Add(daemontest.Scaled(timeout))
	for spins := 0; ; spins++ {
		n, err := cq.Poll(e.wcs[:])
		if err != nil {
			return nil, fmt.Errorf("%s: poll: %w", e.name, err)
		}
		if n > 0 {
			return e.wcs[:n], nil
		}
		if time.Now().After(deadline) {
			return nil, fmt.Errorf("%s: no completion within %v: %w", e.name, daemontest.Scaled(timeout), errTimeout)
		}
		if spins < 100 {
			runtime.Gosched()
		} else {
			time.Sleep(50 * time.Microsecond)
		}
	}
}

// one waits for exactly one completion of cq.
func (e *ep) one(cq *ofverbs.CQ) (ofverbs.WC, error) {
	n, err := 0, error(nil)
	deadline := time.Now().Add(daemontest.Scaled(30 * time.Second))
	for n == 0 && err == nil {
		n, err = cq.Poll(e.wcs[:1])
		if n == 0 && time.Now().After(deadline) {
			return ofverbs.WC{}, fmt.Errorf("%s: no completion: %w", e.name, errTimeout)
		}
		if n == 0 {
			time.Sleep(20 * time.Microsecond)
		}
	}
	return e.wcs[0], err
}

func (e *ep) post(wr ofverbs.SendWR) error {
	if n, err := e.qp.PostSend([]ofverbs.SendWR{wr}); n != 1 {
		return fmt.Errorf("%s: post %v: %w", e.name, wr.Opcode, err)
	}
	return nil
}

func (e *ep) postRecv(id uint64, off, n int) error {
	if k, err := e.qp.PostRecv([]ofverbs.RecvWR{{ID: id, SGL: []ofverbs.SGE{e.mr.SGE(e.mem[off : off+n])}}}); k != 1 {
		return fmt.Errorf("%s: post receive: %w", e.name, err)
	}
	return nil
}

// atomicWR is a FetchAdd (add) or CmpSwap of the word at raddr/rkey with
// its result into e's buffer at resOff.
func (e *ep) atomicWR(id uint64, op ofverbs.SendOpcode, rkey uint32, raddr uint64, resOff int, compareAdd, swap uint64) ofverbs.SendWR {
	return ofverbs.SendWR{ID: id, Opcode: op, Signaled: true, RKey: rkey, RemoteAddr: raddr,
		CompareAdd: compareAdd, Swap: swap, SGL: []ofverbs.SGE{e.mr.SGE(e.mem[resOff : resOff+8])}}
}

// atomicOnce posts one atomic and waits for it; it returns the original
// value or the completion's error.
func (e *ep) atomicOnce(id uint64, op ofverbs.SendOpcode, rkey uint32, raddr uint64, compareAdd, swap uint64, ah *ofverbs.AH) (uint64, ofverbs.WC, error) {
	const resOff = 8
	wr := e.atomicWR(id, op, rkey, raddr, resOff, compareAdd, swap)
	wr.AH = ah
	if err := e.post(wr); err != nil {
		return 0, ofverbs.WC{}, err
	}
	wc, err := e.one(e.scq)
	if err != nil {
		return 0, wc, err
	}
	if wc.Err() != nil {
		return 0, wc, wc.Err()
	}
	if wc.ID != id {
		return 0, wc, fmt.Errorf("%s: completion of %d, want %d", e.name, wc.ID, id)
	}
	return e.word(resOff), wc, nil
}

// hammer runs ops FetchAdds of 1 on the word at raddr/rkey, window at a
// time, and returns the fetched values.
func (e *ep) hammer(ops, window int, rkey uint32, raddr uint64, ah *ofverbs.AH) ([]uint64, error) {
	wantOp := ofverbs.WCFetchAdd
	got := make([]uint64, 0, ops)
	posted, out := 0, 0
	for len(got) < ops {
		for out < window && posted < ops {
			slot := posted % window
			wr := e.atomicWR(uint64(posted), ofverbs.WRFetchAdd, rkey, raddr, 64+8*slot, 1, 0)
			wr.AH = ah
			if err := e.post(wr); err != nil {
				return got, err
			}
			posted++
			out++
		}
		wcs, err := e.poll(e.scq, 60*time.Second)
		if err != nil {
			return got, fmt.Errorf("%d of %d done: %w", len(got), ops, err)
		}
		for _, wc := range wcs {
			if wc.Err() != nil || wc.Opcode != wantOp || wc.ByteLen != 8 {
				return got, fmt.Errorf("%s: FetchAdd %d: %+v (%v)", e.name, wc.ID, wc, wc.Err())
			}
			got = append(got, e.word(64+8*int(wc.ID%uint64(window))))
			out--
		}
	}
	return got, nil
}

// checkUnique checks that vals hold each of 0..len(vals)-1 exactly once.
func checkUnique(vals []uint64) error {
	seen := make([]bool, len(vals))
	for _, v := range vals {
		if v >= uint64(len(vals)) {
			return fmt.Errorf("fetched %d, beyond %d operations", v, len(vals))
		}
		if seen[v] {
			return fmt.Errorf("value %d fetched twice", v)
		}
		seen[v] = true
	}
	return nil
}

// rcServer accepts RC connections on d for the QPs it makes on srv's PD.
type rcServer struct {
	srv  *ep
	l    *ofverbs.Listener
	mu   sync.Mutex
	qps  []*ofverbs.QP
	errs chan error
	// mergeImm creates the accepting QPs with MergeSendImm.
	mergeImm bool
}

func newRCServer(t *testing.T, srv *ep, ip string) *rcServer {
	t.Helper()
	l, err := srv.ctx.Listen(ip + ":0") // the daemon picks the port (Listener.Addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	return &rcServer{srv: srv, l: l, errs: make(chan error, 64)}
}

// accept answers one connection request with a new QP (RQ depth 64,
// receives posted into the server buffer's second half by the caller).
func (s *rcServer) accept() (*ofverbs.QP, error) {
	req, err := s.l.GetRequest(daemontest.Scaled(20 * time.Second))
	if err != nil {
		return nil, err
	}
	qp, err := s.srv.pd.CreateQP(ofverbs.QPInitAttr{Type: ofverbs.QPTypeRC, SendCQ: s.srv.scq, RecvCQ: s.srv.rcq,
		Cap: ofverbs.QPCap{MaxSendWR: 16, MaxRecvWR: 64, MaxSendSGE: 1, MaxRecvSGE: 1}, MergeSendImm: s.mergeImm})
	if err != nil {
		req.Reject(nil)
		return nil, err
	}
	if err := qp.ModifyState(ofverbs.QPStateInit); err != nil {
		return nil, err
	}
	if err := req.Accept(qp, ofverbs.ConnParam{}); err != nil {
		return nil, err
	}
	s.mu.Lock()
	s.qps = append(s.qps, qp)
	s.mu.Unlock()
	return qp, nil
}

// connect connects c's QP to s (accepting in a goroutine); the server's
// QP is returned.
func (s *rcServer) connect(c *ep) (*ofverbs.QP, error) {
	type res struct {
		qp  *ofverbs.QP
		err error
	}
	ch := make(chan res, 1)
	go func() {
		qp, err := s.accept()
		ch <- res{qp, err}
	}()
	if err := c.qp.Connect(s.l.Addr(), ofverbs.ConnParam{Timeout: daemontest.Scaled(10 * time.Second)}); err != nil {
		return nil, fmt.Errorf("%s: connect: %w", c.name, err)
	}
	select {
	case r := <-ch:
		return r.qp, r.err
	case <-time.After(daemontest.Scaled(30 * time.Second)):
		return nil, fmt.Errorf("%s: accept did not return", c.name)
	}
}

// ahTo creates an address handle on e's PD for a datagram QP (its
// address and Q_Key).
func (e *ep) ahTo(t *testing.T, a ofverbs.Endpoint) *ofverbs.AH {
	t.Helper()
	ah, err := e.pd.CreateAHTo(a)
	if err != nil {
		t.Fatal(err)
	}
	return ah
}
