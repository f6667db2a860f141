package rd_test

import (
	"testing"
	"time"

	"github.com/iwarpd/iwarpd/llp/rd"
	"github.com/iwarpd/iwarpd/llp/rd/rdtest"
)

// Issue 5: RD goodput under 1 % loss must stay ≥ 0.7 of the goodput
// without loss. On the virtual clock (no wall-clock time, deterministic
// seeds) a one-way bulk transfer of 10000 datagrams over a 100 µs link
// (FIFO: no jitter) takes T(0 %) without loss and T(p) with loss p each
// way; goodput(p)/goodput(0) = T(0)/T(p). The link has no bandwidth limit,
// so the transfer is window-bound, the case where a hole stalls the
// window: before the SACK Blocks, the in-flight window (SACKed datagrams
// leave it) and RACK's reordering window, a hole held the window for an
// RTO-like SRTT+4·RTTVAR and the sender could not see a second hole more
// than 32 datagrams after the first; the same test measured 0.41 at 1 %
// (27 timeouts) and 0.02 at 5 % (503 timeouts) then, 0.98 and 0.91 (no
// timeout) now. The bound is checked on the total time over five fixed seeds, so
// the test is deterministic (no probability of a spurious failure).
//
// Issue 13: at 20 % the goodput collapsed (0.11 of lossless here; 7.98 s
// for 10000 datagrams with seed 1 and a window of 32): an ACK that came
// after a timeout gave an RTT sample measuring the timeout, SRTT grew to
// 35 ms on a 200 µs path, every later timeout waited MaxRTO. With samples
// after a timeout taken from the timeout, and backoff on timeouts only:
// 0.45 (10 %: 0.79, as before).
func TestSimGoodputUnderLoss(t *testing.T) {
	const total = 10000
	run := func(loss float64, seed uint64) (time.Duration, rd.Stats) {
		n := rdtest.NewNet(rdtest.LinkConfig{Loss: loss, Delay: 100 * time.Microsecond}, seed)
		cfg := rd.DefaultConfig()
		cfg.Window = 64
		a := n.AddNode(cfg, 0xA1)
		b := n.AddNode(cfg, 0xB1)
		a.Queue(b, tokens(0, total, 1)...)
		start := n.Now
		if !n.Run(start.Add(time.Minute), 5_000_000, func() bool { return a.Count(rd.Acked) == total }) {
			t.Fatalf("loss %v seed %d: acked %d/%d; %+v", loss, seed, a.Count(rd.Acked), total, a.EP.Stats())
		}
		checkClean(t, n)
		if got := len(b.Delivered[a.Addr]); got != total {
			t.Fatalf("loss %v seed %d: delivered %d, want %d", loss, seed, got, total)
		}
		return n.Now.Sub(start), a.EP.Stats()
	}
	var clean time.Duration
	for seed := uint64(1); seed <= 5; seed++ {
		d, _ := run(0, seed)
		clean += d
	}
	for _, tc := range []struct {
		loss, min float64
	}{{0.01, 0.7}, {0.05, 0.6}, {0.10, 0.6}, {0.20, 0.3}} {
		var lossy time.Duration
		var timeouts, fast uint64
		for seed := uint64(1); seed <= 5; seed++ {
			d, st := run(tc.loss, seed)
			lossy += d
			timeouts += st.Timeouts
			fast += st.FastRetransmits
		}
		ratio := float64(clean) / float64(lossy)
		t.Logf("loss %.0f %%: goodput %.2f of lossless (%v vs %v over 5 seeds), %d fast retransmits, %d timeouts",
			100*tc.loss, ratio, lossy, clean, fast, timeouts)
		if ratio < tc.min {
			t.Errorf("loss %.0f %%: goodput %.2f of lossless, want ≥ %.2f", 100*tc.loss, ratio, tc.min)
		}
		if timeouts > fast/10 {
			t.Errorf("loss %.0f %%: %d timeouts for %d fast retransmits: holes should be repaired by SACK", 100*tc.loss, timeouts, fast)
		}
	}
}
