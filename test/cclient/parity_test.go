package cclient

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/iwarpd/iwarpd/ofverbs"
	"github.com/iwarpd/iwarpd/test/daemontest"
)

// TestParity runs the scenarios of c/tests/t_parity.c through ofverbs and
// through the C core against the same two daemons and compares what they
// observe line by line: the completion sequences (wr_id, opcode, status,
// byte_len, flags, immediate data) of UD, RD and RC work (with immediate
// data and RFC 7306 atomics, and their results), and the connection manager's
// outcomes (private data both ways, a reject's reason, the errno of
// connecting to nothing, disconnect statuses). Keep this file and
// t_parity.c in step.
func TestParity(t *testing.T) {
	needC(t)
	a, b := pair(t)
	var got []string
	p := &parity{t: t, a: a, b: b, out: &got}
	p.datagram("ud", ofverbs.QPTypeUD)
	p.datagram("rd", ofverbs.QPTypeRD)
	p.rc()
	p.cm()
	cOut := strings.Split(strings.TrimSpace(runC(t, "t_parity", a, b)), "\n")
	if len(got) != len(cOut) {
		t.Errorf("ofverbs gave %d completions, the C core %d", len(got), len(cOut))
	}
	for i := 0; i < max(len(got), len(cOut)); i++ {
		var g, c string
		if i < len(got) {
			g = got[i]
		}
		if i < len(cOut) {
			c = cOut[i]
		}
		if g != c {
			t.Errorf("completion %d: ofverbs %q, C core %q", i, g, c)
		}
	}
	if !t.Failed() {
		t.Logf("%d completions agree, e.g. %q", len(got), got[0])
	}
}

const badKey = 0x7fffff00

type parity struct {
	t    *testing.T
	a, b *daemontest.Daemon
	out  *[]string
}

// gEP is one side of a scenario: the Go twin of testlib.c's struct ep.
type gEP struct {
	ctx      *ofverbs.Context
	pd       *ofverbs.PD
	scq, rcq *ofverbs.CQ
	qp       *ofverbs.QP
	mem      []byte
	mr       *ofverbs.MR
}

func (p *parity) open(d *daemontest.Daemon, typ ofverbs.QPType) *gEP {
	t := p.t
	t.Helper()
	e := &gEP{ctx: d.Open(t, "parity-go")}
	var err error
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	e.pd, err = e.ctx.AllocPD()
	must(err)
	e.scq, err = e.ctx.CreateCQ(64, nil)
	must(err)
	e.rcq, err = e.ctx.CreateCQ(64, nil)
	must(err)
	buf, err := e.ctx.AllocBuffer(1 << 16)
	must(err)
	e.mem = buf.Bytes()
	e.mr, err = e.pd.RegMR(e.mem, ofverbs.AccessLocalWrite|ofverbs.AccessRemoteWrite|ofverbs.AccessRemoteRead|ofverbs.AccessRemoteAtomic)
	must(err)
	e.qp, err = e.pd.CreateQP(ofverbs.QPInitAttr{Type: typ, SendCQ: e.scq, RecvCQ: e.rcq,
		Cap: ofverbs.QPCap{MaxSendWR: 16, MaxRecvWR: 16, MaxSendSGE: 4, MaxRecvSGE: 4, MaxInline: 256}})
	must(err)
	if typ != ofverbs.QPTypeRC {
		must(e.qp.ModifyState(ofverbs.QPStateInit, ofverbs.QPStateRTR, ofverbs.QPStateRTS))
	} else {
		must(e.qp.ModifyState(ofverbs.QPStateInit))
	}
	return e
}

func (e *gEP) sge(off, n int) ofverbs.SGE { return e.mr.SGE(e.mem[off : off+n]) }

func (p *parity) recv1(e *gEP, id uint64, off, n int) {
	if _, err := e.qp.PostRecv([]ofverbs.RecvWR{{ID: id, SGL: []ofverbs.SGE{e.sge(off, n)}}}); err != nil {
		p.t.Fatal(err)
	}
}

func (p *parity) send1(e *gEP, wr ofverbs.SendWR) {
	if _, err := e.qp.PostSend([]ofverbs.SendWR{wr}); err != nil {
		p.t.Fatal(err)
	}
}

// drain waits for nsend and nrecv completions and records them as
// t_parity.c prints them.
func (p *parity) drain(scen string, e *gEP, nsend, nrecv int) {
	p.t.Helper()
	wait := func(cq *ofverbs.CQ, q string) {
		wcs := make([]ofverbs.WC, 1)
		deadline := time.Now().Add(daemontest.Scaled(10 * time.Second))
		for i := 0; ; i++ {
			n, err := cq.Poll(wcs)
			if err != nil {
				p.t.Fatal(err)
			}
			if n == 1 {
				wc := wcs[0]
				flags := "0" // C's %#x of 0
				if wc.Flags != 0 {
					flags = fmt.Sprintf("%#x", wc.Flags)
				}
				*p.out = append(*p.out, fmt.Sprintf("%s %s wr=%d op=%d status=%d len=%d flags=%s imm=%d", scen, q, wc.ID,
					uint8(wc.Opcode), uint8(wc.Status), wc.ByteLen, flags, wc.Imm))
				return
			}
			if time.Now().After(deadline) || i > 10000000 {
				p.t.Fatalf("%s: no %s completion within %v", scen, q, daemontest.Scaled(10*time.Second))
			}
			if i > 1000 {
				time.Sleep(100 * time.Microsecond)
			}
		}
	}
	for range nsend {
		wait(e.scq, "send")
	}
	for range nrecv {
		wait(e.rcq, "recv")
	}
}

func (p *parity) datagram(scen string, typ ofverbs.QPType) {
	t := p.t
	a, b := p.open(p.a, typ), p.open(p.b, typ)
	ah, err := a.pd.CreateAHTo(b.qp.Endpoint())
	if err != nil {
		t.Fatal(err)
	}
	p.recv1(b, 100, 0, 4096)
	p.send1(a, ofverbs.SendWR{ID: 1, Signaled: true, SGL: []ofverbs.SGE{a.sge(0, 1000)}, AH: ah})
	p.drain(scen, a, 1, 0)
	p.drain(scen, b, 0, 1)

	p.recv1(b, 101, 0, 4096)
	msg := make([]byte, 200)
	msg[0], msg[1], msg[2] = 1, 2, 3
	p.send1(a, ofverbs.SendWR{ID: 2, Signaled: true, Inline: true, Solicited: true, InlineData: msg, AH: ah})
	p.drain(scen, a, 1, 0)
	p.drain(scen, b, 0, 1)

	p.recv1(b, 102, 0, 4096)
	p.recv1(b, 103, 0, 4096)
	p.send1(a, ofverbs.SendWR{ID: 3, SGL: []ofverbs.SGE{a.sge(0, 64)}, AH: ah})
	p.send1(a, ofverbs.SendWR{ID: 4, Signaled: true, AH: ah})
	p.drain(scen, a, 1, 0)
	p.drain(scen, b, 0, 2)

	// A Write-Record with Immediate: its record completion carries the value.
	p.recv1(b, 106, 0, 4096)
	p.send1(a, ofverbs.SendWR{ID: 6, Opcode: ofverbs.WRWriteRecordWithImm, Signaled: true, Imm: 0x4321, AH: ah,
		RKey: b.mr.RKey(), RemoteAddr: b.mr.Addr() + 8192, SGL: []ofverbs.SGE{a.sge(0, 300)}})
	p.drain(scen, a, 1, 0)
	p.drain(scen, b, 0, 1)

	bad := a.sge(0, 100)
	bad.LKey = badKey
	p.send1(a, ofverbs.SendWR{ID: 5, Signaled: true, SGL: []ofverbs.SGE{bad}, AH: ah})
	p.drain(scen, a, 1, 0)

	p.recv1(b, 104, 0, 4096)
	p.recv1(b, 105, 0, 4096)
	if err := b.qp.ModifyState(ofverbs.QPStateError); err != nil {
		t.Fatal(err)
	}
	p.drain(scen, b, 0, 2)
	a.ctx.Close()
	b.ctx.Close()
}

func (p *parity) rc() {
	t := p.t
	const scen = "rc"
	a, b := p.open(p.a, ofverbs.QPTypeRC), p.open(p.b, ofverbs.QPTypeRC)
	l, err := b.ctx.Listen(":0")
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- a.qp.Connect(netip.MustParseAddrPort(l.Addr().String()), ofverbs.ConnParam{}) }()
	req, err := l.GetRequest(daemontest.Scaled(20 * time.Second))
	if err != nil {
		t.Fatal(err)
	}
	if err := req.Accept(b.qp, ofverbs.ConnParam{}); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	remote := func(off int) uint64 { return b.mr.Addr() + uint64(off) }

	p.recv1(b, 100, 0, 8192)
	p.send1(a, ofverbs.SendWR{ID: 1, Signaled: true, SGL: []ofverbs.SGE{a.sge(0, 5000)}})
	p.drain(scen, a, 1, 0)
	p.drain(scen, b, 0, 1)

	p.send1(a, ofverbs.SendWR{ID: 2, Opcode: ofverbs.WRRDMAWrite, Signaled: true, SGL: []ofverbs.SGE{a.sge(0, 20000)},
		RemoteAddr: remote(8192), RKey: b.mr.RKey()})
	p.send1(a, ofverbs.SendWR{ID: 3, Opcode: ofverbs.WRRDMARead, Signaled: true, SGL: []ofverbs.SGE{a.sge(30000, 10000)},
		RemoteAddr: remote(40000), RKey: b.mr.RKey()})
	p.drain(scen, a, 2, 0)

	p.recv1(b, 101, 0, 8192)
	p.send1(a, ofverbs.SendWR{ID: 4, Signaled: true, Inline: true, Solicited: true, InlineData: []byte("0123456789")})
	p.drain(scen, a, 1, 0)
	p.drain(scen, b, 0, 1)

	// RFC 7306's Immediate Data message consumes a receive of its own.
	p.recv1(b, 102, 0, 8192)
	p.recv1(b, 103, 0, 8192)
	p.recv1(b, 104, 0, 8192)
	p.send1(a, ofverbs.SendWR{ID: 6, Opcode: ofverbs.WRSendWithImm, Signaled: true, SGL: []ofverbs.SGE{a.sge(0, 16)}, Imm: 0x1234})
	p.drain(scen, a, 1, 0)
	p.drain(scen, b, 0, 2)
	p.send1(a, ofverbs.SendWR{ID: 7, Opcode: ofverbs.WRWriteWithImm, Signaled: true, SGL: []ofverbs.SGE{a.sge(0, 100)},
		RemoteAddr: remote(50000), RKey: b.mr.RKey(), Imm: 0x5678})
	p.drain(scen, a, 1, 0)
	p.drain(scen, b, 0, 1)

	binary.NativeEndian.PutUint64(b.mem[60000:], 5)
	res := func() uint64 { return binary.NativeEndian.Uint64(a.mem[1000:]) }
	rem := func() uint64 { return binary.NativeEndian.Uint64(b.mem[60000:]) }
	p.send1(a, ofverbs.SendWR{ID: 8, Opcode: ofverbs.WRFetchAdd, Signaled: true, SGL: []ofverbs.SGE{a.sge(1000, 8)},
		RemoteAddr: remote(60000), RKey: b.mr.RKey(), CompareAdd: 10})
	p.drain(scen, a, 1, 0)
	*p.out = append(*p.out, fmt.Sprintf("rc fetch-add result=%d remote=%d", res(), rem()))
	p.send1(a, ofverbs.SendWR{ID: 9, Opcode: ofverbs.WRCmpSwap, Signaled: true, SGL: []ofverbs.SGE{a.sge(1000, 8)},
		RemoteAddr: remote(60000), RKey: b.mr.RKey(), CompareAdd: 15, Swap: 99})
	p.drain(scen, a, 1, 0)
	*p.out = append(*p.out, fmt.Sprintf("rc cmp-swap result=%d remote=%d", res(), rem()))

	bad := a.sge(0, 100)
	bad.LKey = badKey
	p.send1(a, ofverbs.SendWR{ID: 5, Signaled: true, SGL: []ofverbs.SGE{bad}})
	p.drain(scen, a, 1, 0)
	l.Close()
	a.ctx.Close()
	b.ctx.Close()
}

// cm: the connection manager's observable outcomes, as t_parity.c's cm().
func (p *parity) cm() {
	t := p.t
	a, b := p.open(p.a, ofverbs.QPTypeRC), p.open(p.b, ofverbs.QPTypeRC)
	l, err := b.ctx.Listen(":0")
	if err != nil {
		t.Fatal(err)
	}
	addr := netip.MustParseAddrPort(l.Addr().String())
	say := func(format string, args ...any) { *p.out = append(*p.out, fmt.Sprintf(format, args...)) }
	timeout := daemontest.Scaled(20 * time.Second)
	done := make(chan error, 1)
	go func() { done <- a.qp.Connect(addr, ofverbs.ConnParam{PrivateData: []byte("p-hello")}) }()
	req, err := l.GetRequest(timeout)
	if err != nil {
		t.Fatal(err)
	}
	say("cm request pdata=%s", req.PrivateData())
	if err := req.Accept(b.qp, ofverbs.ConnParam{PrivateData: []byte("p-welcome")}); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	say("cm established pdata=%s", a.qp.ConnInfo().PrivateData)

	newQP := func() *ofverbs.QP {
		q, err := a.pd.CreateQP(ofverbs.QPInitAttr{Type: ofverbs.QPTypeRC, SendCQ: a.scq, RecvCQ: a.rcq,
			Cap: ofverbs.QPCap{MaxSendWR: 4, MaxRecvWR: 4, MaxSendSGE: 1, MaxRecvSGE: 1}})
		if err != nil {
			t.Fatal(err)
		}
		if err := q.ModifyState(ofverbs.QPStateInit); err != nil {
			t.Fatal(err)
		}
		return q
	}
	q2 := newQP()
	go func() { done <- q2.Connect(addr, ofverbs.ConnParam{}) }()
	if req, err = l.GetRequest(timeout); err != nil {
		t.Fatal(err)
	}
	say("cm request pdata=%s", req.PrivateData())
	if err := req.Reject([]byte("p-no")); err != nil {
		t.Fatal(err)
	}
	var rej *ofverbs.RejectedError
	if err := <-done; !errors.As(err, &rej) {
		t.Fatalf("connect after reject: %v", err)
	}
	say("cm rejected pdata=%s", rej.PrivateData)
	q2.Close()

	l.Close()
	q3 := newQP()
	err = q3.Connect(addr, ofverbs.ConnParam{})
	var verr *ofverbs.Error
	if !errors.As(err, &verr) {
		t.Fatalf("connect to nothing: %v", err)
	}
	say("cm connect-failed errno=%d", int(verr.Errno))
	q3.Close()

	if err := a.qp.Disconnect(); err != nil {
		t.Fatal(err)
	}
	for _, side := range []struct {
		name string
		qp   *ofverbs.QP
	}{{"active", a.qp}, {"passive", b.qp}} {
		select {
		case ev := <-side.qp.CMEvents():
			if ev.Type == ofverbs.CMEstablished { // the passive QP's own, after Accept
				ev = <-side.qp.CMEvents()
			}
			if ev.Type != ofverbs.CMDisconnected {
				t.Fatalf("%s: CM event %v, want disconnected", side.name, ev.Type)
			}
			say("cm disconnected-%s errno=%d", side.name, int(ev.Errno))
		case <-time.After(timeout):
			t.Fatalf("%s: no disconnected event within %v", side.name, timeout)
		}
	}
	a.ctx.Close()
	b.ctx.Close()
}
