package rd_test

import (
	"testing"
	"time"

	"github.com/iwarpd/iwarpd/llp/rd"
	"github.com/iwarpd/iwarpd/llp/rd/rdtest"
)

// Many new peers at once over a lossy link (20 % each way, jitter): every
// one completes the handshake — some Challenges are lost or limited, the
// senders' timers resend their first flight — and delivers everything,
// exactly once and in order, with no failure; the receiver's reply
// limits (a burst of 100) are reached and held. Deterministic seeds.
func TestSimHandshakeManyPeers(t *testing.T) {
	for seed := uint64(1); seed <= 3; seed++ {
		n := rdtest.NewNet(rdtest.LinkConfig{Loss: 0.2, Delay: 100 * time.Microsecond, Jitter: 100 * time.Microsecond}, seed)
		cfg := rd.DefaultConfig()
		cfg.Window = 16
		cfg.MaxRetries = 30 // loss must not end anything
		hub := n.AddNode(cfg, 0x5000)
		const peers, msgs = 150, 20
		var senders []*rdtest.Node
		for i := range peers {
			s := n.AddNode(cfg, 0x6000+uint32(i))
			s.Queue(hub, tokens(0, msgs, 1)...)
			senders = append(senders, s)
		}
		done := func() bool {
			for _, s := range senders {
				if s.Count(rd.Acked) != msgs {
					return false
				}
			}
			return true
		}
		if !n.Run(n.Now.Add(time.Minute), 5_000_000, done) {
			acked := 0
			for _, s := range senders {
				acked += s.Count(rd.Acked)
			}
			t.Fatalf("seed %d: acked %d of %d; hub %+v", seed, acked, peers*msgs, hub.EP.Stats())
		}
		checkClean(t, n)
		for _, s := range senders {
			if got := len(hub.Delivered[s.Addr]); got != msgs {
				t.Fatalf("seed %d: %v delivered %d, want %d", seed, s.Addr, got, msgs)
			}
			if f := s.Count(rd.Failed) + s.Count(rd.PeerReset); f != 0 {
				t.Fatalf("seed %d: %v: %d failed", seed, s.Addr, f)
			}
		}
		st := hub.EP.Stats()
		if st.Challenges < peers || st.PeersCreated != peers || st.RepliesLimited == 0 {
			t.Errorf("seed %d: %d challenges (%d limited), %d peers created for %d new peers", seed, st.Challenges, st.RepliesLimited, st.PeersCreated, peers)
		}
		t.Logf("seed %d: virtual %v, hub: %d unproven, %d challenges, %d limited", seed,
			n.Now.Sub(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)), st.Unproven, st.Challenges, st.RepliesLimited)
	}
}
