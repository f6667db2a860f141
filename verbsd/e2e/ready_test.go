package e2e

import (
	"testing"

	"github.com/iwarpd/iwarpd/proto"
	"github.com/iwarpd/iwarpd/verbsd/config"
	"github.com/iwarpd/iwarpd/verbsd/rnic"
	"github.com/iwarpd/iwarpd/verbsd/verbsdtest"
)

// TestReadyListIdleQPs: with idle QPs beside one busy pair, the engine's
// work per pass (QPs served plus QPs probed, rnic/ready.go) does not grow with
// the number of idle QPs: 64 idle UD QPs cost a pass what 1 does. The
// count is the engine's own (visits), not a time.
func TestReadyListIdleQPs(t *testing.T) {
	perPass := map[int]float64{}
	for _, idle := range []int{1, 64} {
		srv, path := startFast(t, func(c *config.Config) { c.Engines = 1 }) // 100 UD ports; one engine: its passes are counted
		a, b := newFastNode(t, path, 1<<16), newFastNode(t, path, 1<<16)
		c, err := verbsdtest.Dial(path, false)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(c.Close)
		pd, err := c.AllocPD()
		if err != nil {
			t.Fatal(err)
		}
		cq, err := c.CreateCQ(64, 0)
		if err != nil {
			t.Fatal(err)
		}
		caps := proto.QPCaps{MaxSendWR: 16, MaxRecvWR: 16, MaxSendSGE: 1, MaxRecvSGE: 1}
		for range idle {
			qp, err := c.CreateQP(pd, cq, cq, caps, verbsdtest.QPOptions{})
			if err != nil {
				t.Fatal(err)
			}
			if err := qp.ToRTS(); err != nil {
				t.Fatal(err)
			}
		}
		ah, err := a.c.CreateAH(a.pd, b.qp.Addr)
		if err != nil {
			t.Fatal(err)
		}
		ping := udPing(a, b, ah, 64)
		for i := range 100 { // the idle QPs leave the ready list
			if err := ping(i); err != nil {
				t.Fatal(err)
			}
		}
		v0, p0 := readyCounters(t, srv.Device().Engs[0])
		const msgs = 1000
		for i := range msgs {
			if err := ping(100 + i); err != nil {
				t.Fatal(err)
			}
		}
		v1, p1 := readyCounters(t, srv.Device().Engs[0])
		if p1-p0 < msgs {
			t.Fatalf("%d idle QPs: %d passes for %d messages", idle, p1-p0, msgs)
		}
		perPass[idle] = float64(v1-v0) / float64(p1-p0)
		t.Logf("%d idle QPs + 2 busy: %d passes, %.2f QPs visited per pass", idle, p1-p0, perPass[idle])
	}
	// A scan of every QP visits 66 a pass; the ready list 2 busy QPs plus
	// at most ReadyProbe probes (and, rarely, a whole scan after a command
	// or a timed wake-up).
	if perPass[64] > 2+rnic.ReadyProbe+2 {
		t.Errorf("64 idle QPs: %.2f QPs visited per pass, want at most %d (2 busy + %d probed)", perPass[64], 2+rnic.ReadyProbe+2, rnic.ReadyProbe)
	}
	if perPass[64] > perPass[1]+rnic.ReadyProbe {
		t.Errorf("per-pass work grows with idle QPs: %.2f with 1, %.2f with 64", perPass[1], perPass[64])
	}
}

// readyCounters reads the engine's visit and pass counters (on the engine).
func readyCounters(t *testing.T, e *rnic.Engine) (visits, passes uint64) {
	t.Helper()
	if err := e.Do(func() error { visits, passes = e.Visits, e.Passes; return nil }); err != nil {
		t.Fatal(err)
	}
	return visits, passes
}
