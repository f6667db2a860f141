package rd_test

import (
	"testing"
	"time"

	"github.com/iwarpd/iwarpd/llp/rd"
	"github.com/iwarpd/iwarpd/llp/rd/rdtest"
)

// Loss recovery must be selective: a lost datagram costs about one
// retransmission, not a window of them (go-back-N), and duplicated or
// jittered datagrams cost none. One-way bulk transfer of 2000 datagrams
// on the virtual clock.
//
// The bound, per lost DATA datagram (new or retransmitted): a selective
// sender resends exactly the lost ones, ratio 1; a lost ACK is normally
// covered by the next cumulative ACK and rarely (the ACKs of a window's
// tail lost) costs one spurious retransmission, and heavy jitter (a
// datagram overtaken by three later ones by more than the reordering
// window) a few more. We allow 1.5; a go-back-N sender resends what
// follows the hole too (up to a window) and the previous code measured
// 3–14 here.
func TestSimRetransmitEfficiency(t *testing.T) {
	cases := []struct {
		name   string
		link   rdtest.LinkConfig
		window int
	}{
		{"loss1", rdtest.LinkConfig{Loss: 0.01, Delay: 50 * time.Microsecond, Jitter: 20 * time.Microsecond}, 32},
		{"loss5", rdtest.LinkConfig{Loss: 0.05, Delay: 50 * time.Microsecond, Jitter: 20 * time.Microsecond}, 32},
		{"loss5-w256", rdtest.LinkConfig{Loss: 0.05, Delay: 50 * time.Microsecond, Jitter: 20 * time.Microsecond}, 256},
		{"loss5-jitter", rdtest.LinkConfig{Loss: 0.05, Delay: 50 * time.Microsecond, Jitter: 300 * time.Microsecond}, 32},
		{"dup", rdtest.LinkConfig{Duplicate: 0.05, Delay: 50 * time.Microsecond, Jitter: 20 * time.Microsecond}, 32},
	}
	for i, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var retx, timeouts, lost uint64
			for seed := range 5 {
				n := rdtest.NewNet(tc.link, uint64(100*i+seed+1))
				cfg := rd.DefaultConfig()
				cfg.Window = tc.window
				a := n.AddNode(cfg, 0xA1)
				b := n.AddNode(cfg, 0xB1)
				const total = 2000
				a.Queue(b, tokens(0, total, 1)...)
				if !n.Run(n.Now.Add(time.Minute), 2_000_000, func() bool { return a.Count(rd.Acked) == total }) {
					t.Fatalf("seed %d: acked %d/%d; a %+v", seed, a.Count(rd.Acked), total, a.EP.Stats())
				}
				checkClean(t, n)
				if got := len(b.Delivered[a.Addr]); got != total {
					t.Fatalf("seed %d: delivered %d, want %d", seed, got, total)
				}
				st := a.EP.Stats()
				retx += st.Retransmits
				timeouts += st.Timeouts
				lost += n.LostData
			}
			ratio := float64(retx) / float64(max(lost, 1))
			t.Logf("lost %d, retransmits %d (%.2f per loss), timeouts %d", lost, retx, ratio, timeouts)
			if tc.link.Loss == 0 {
				// Duplicates and jitter alone: nothing is lost, nothing may
				// be resent (a duplicate ACK is not a loss signal).
				if retx != 0 || timeouts != 0 {
					t.Errorf("no loss: %d retransmits, %d timeouts, want 0", retx, timeouts)
				}
				return
			}
			if ratio > 1.5 {
				t.Errorf("%.2f retransmissions per lost datagram (%d/%d), want ≤ 1.5", ratio, retx, lost)
			}
			if timeouts > lost/2 {
				t.Errorf("%d timeouts for %d losses: recovery should mostly be by SACK", timeouts, lost)
			}
		})
	}
}
