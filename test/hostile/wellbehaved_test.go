package hostile

import (
	"bytes"
	"fmt"
	"testing"
	"time"

	"github.com/iwarpd/iwarpd/ofverbs"
	"github.com/iwarpd/iwarpd/test/daemontest"
)

// goodClient is the well-behaved client that runs beside an attack: one
// session with two UD QPs that exchange checked messages.
type goodClient struct {
	ctx    *ofverbs.Context
	pd     *ofverbs.PD
	mem    []byte
	mr     *ofverbs.MR
	cq     *ofverbs.CQ
	qa, qb *ofverbs.QP
	ah     *ofverbs.AH
	round  int
}

func newGoodClient(t *testing.T, d *daemontest.Daemon) *goodClient {
	t.Helper()
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatalf("well-behaved client: %v", err)
		}
	}
	g := &goodClient{ctx: d.Open(t, "well-behaved")}
	var err error
	g.pd, err = g.ctx.AllocPD()
	must(err)
	buf, err := g.ctx.AllocBuffer(1 << 16)
	must(err)
	g.mem = buf.Bytes()
	g.mr, err = g.pd.RegMR(g.mem, ofverbs.AccessLocalWrite)
	must(err)
	g.cq, err = g.ctx.CreateCQ(64, nil)
	must(err)
	for _, q := range []**ofverbs.QP{&g.qa, &g.qb} {
		*q, err = g.pd.CreateQP(ofverbs.QPInitAttr{Type: ofverbs.QPTypeUD, SendCQ: g.cq, RecvCQ: g.cq,
			Cap: ofverbs.QPCap{MaxSendWR: 16, MaxRecvWR: 16, MaxSendSGE: 1, MaxRecvSGE: 1}})
		must(err)
		must((*q).ModifyState(ofverbs.QPStateInit, ofverbs.QPStateRTR, ofverbs.QPStateRTS))
	}
	g.ah, err = g.pd.CreateAHTo(g.qb.Endpoint())
	must(err)
	return g
}

// check sends one 4 KiB message from qa to qb and verifies both
// completions and every octet.
func (g *goodClient) check(t *testing.T, when string) {
	t.Helper()
	if err := g.exchange(); err != nil {
		t.Fatalf("well-behaved client %s: %v", when, err)
	}
}

func (g *goodClient) exchange() error {
	g.round++
	const n = 4096
	src, dst := g.mem[:n], g.mem[n:2*n]
	for i := range src {
		src[i] = byte(i + 3*g.round)
	}
	clear(dst)
	if k, err := g.qb.PostRecv([]ofverbs.RecvWR{{ID: 2, SGL: []ofverbs.SGE{g.mr.SGE(dst)}}}); k != 1 {
		return fmt.Errorf("post receive: %w", err)
	}
	if k, err := g.qa.PostSend([]ofverbs.SendWR{{ID: 1, Opcode: ofverbs.WRSend, AH: g.ah, Signaled: true,
		SGL: []ofverbs.SGE{g.mr.SGE(src)}}}); k != 1 {
		return fmt.Errorf("post send: %w", err)
	}
	wcs := make([]ofverbs.WC, 2)
	got := 0
	deadline := time.Now().Add(daemontest.Scaled(10 * time.Second))
	for i := 0; got < 2; i++ {
		k, err := g.cq.Poll(wcs[got:])
		if err != nil {
			return fmt.Errorf("poll: %w", err)
		}
		for _, wc := range wcs[got : got+k] {
			if wc.Status != ofverbs.WCSuccess {
				return fmt.Errorf("completion %+v", wc)
			}
		}
		got += k
		if time.Now().After(deadline) {
			return fmt.Errorf("%d of 2 completions within %v", got, daemontest.Scaled(10*time.Second))
		}
		if i > 100 {
			time.Sleep(100 * time.Microsecond)
		}
	}
	if !bytes.Equal(src, dst) {
		return fmt.Errorf("received data differ")
	}
	return nil
}
