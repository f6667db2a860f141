package rd_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/iwarpd/iwarpd/llp/rd"
	"github.com/iwarpd/iwarpd/llp/rd/rdtest"
)

// tokens returns msgs messages of k datagrams each: msg<<20 | segment,
// offset by base messages.
func tokens(base, msgs, k int) []rd.Token {
	var t []rd.Token
	for m := base; m < base+msgs; m++ {
		for s := 0; s < k; s++ {
			t = append(t, rd.Token(uint64(m)<<20|uint64(s)))
		}
	}
	return t
}

func checkClean(t *testing.T, n *rdtest.Net) {
	t.Helper()
	for _, v := range n.Violations {
		t.Error(v)
	}
}

func TestSimLossyLinks(t *testing.T) {
	cases := []struct {
		name string
		link rdtest.LinkConfig
	}{
		{"clean", rdtest.LinkConfig{Delay: 50 * time.Microsecond}},
		{"loss1", rdtest.LinkConfig{Loss: 0.01, Delay: 50 * time.Microsecond}},
		{"loss5", rdtest.LinkConfig{Loss: 0.05, Delay: 50 * time.Microsecond, Jitter: 20 * time.Microsecond}},
		{"loss20", rdtest.LinkConfig{Loss: 0.20, Delay: 50 * time.Microsecond, Jitter: 50 * time.Microsecond}},
		{"reorder", rdtest.LinkConfig{Reorder: 0.2, Delay: 50 * time.Microsecond}},
		{"duplicate", rdtest.LinkConfig{Duplicate: 0.2, Delay: 50 * time.Microsecond}},
		{"jitter", rdtest.LinkConfig{Delay: 20 * time.Microsecond, Jitter: 500 * time.Microsecond}},
		{"everything", rdtest.LinkConfig{Loss: 0.05, Duplicate: 0.05, Reorder: 0.1, Delay: 50 * time.Microsecond, Jitter: 100 * time.Microsecond}},
	}
	for i, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			n := rdtest.NewNet(tc.link, uint64(i+1))
			cfg := rd.DefaultConfig()
			cfg.Window = 32
			a := n.AddNode(cfg, 0xA1)
			b := n.AddNode(cfg, 0xB1)
			const msgs, k = 100, 5
			a.Queue(b, tokens(0, msgs, k)...)
			b.Queue(a, tokens(0, msgs/2, 3)...)
			done := func() bool {
				return a.Count(rd.Acked) == msgs*k && b.Count(rd.Acked) == msgs/2*3
			}
			if !n.Run(n.Now.Add(time.Minute), 2_000_000, done) {
				t.Fatalf("not done: a acked %d/%d, b acked %d/%d, a→b delivered %d, stats a %+v",
					a.Count(rd.Acked), msgs*k, b.Count(rd.Acked), msgs/2*3, len(b.Delivered[a.Addr]), a.EP.Stats())
			}
			checkClean(t, n)
			if got := len(b.Delivered[a.Addr]); got != msgs*k {
				t.Errorf("a→b delivered %d, want %d", got, msgs*k)
			}
			if got := len(a.Delivered[b.Addr]); got != msgs/2*3 {
				t.Errorf("b→a delivered %d, want %d", got, msgs/2*3)
			}
			if f := a.Count(rd.Failed) + b.Count(rd.Failed); f != 0 {
				t.Errorf("%d failed", f)
			}
			if tc.link.Loss == 0 && tc.link.Reorder == 0 && tc.link.Jitter == 0 && a.EP.Stats().Retransmits != 0 {
				t.Errorf("retransmissions on a clean link: %d", a.EP.Stats().Retransmits)
			}
			t.Logf("virtual %v, sent %d lost %d, a %+v", n.Now.Sub(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)), n.Sent, n.Lost, a.EP.Stats())
		})
	}
}

// A dead link fails the datagram after MaxRetries retransmissions, at
// the time the backoff schedule says: the sum of min(InitialRTO·2^i, MaxRTO)
// for i = 0..MaxRetries.
func TestSimLinkDeadFails(t *testing.T) {
	n := rdtest.NewNet(rdtest.LinkConfig{Down: true, Delay: 50 * time.Microsecond}, 7)
	cfg := rd.DefaultConfig()
	a := n.AddNode(cfg, 1)
	b := n.AddNode(cfg, 2)
	a.Queue(b, 1, 2, 3)
	start := n.Now
	if !n.Run(start.Add(time.Minute), 100_000, func() bool { return a.Count(rd.Failed) == 3 }) {
		t.Fatalf("failed %d, want 3 (events %v)", a.Count(rd.Failed), a.Events)
	}
	var want time.Duration
	for i := 0; i <= cfg.MaxRetries; i++ {
		want += min(cfg.InitialRTO<<i, cfg.MaxRTO)
	}
	if got := a.Events[0].Time.Sub(start); got != want {
		t.Errorf("failed after %v, want %v", got, want)
	}
	for i, ev := range a.Events {
		if ev.Kind != rd.Failed || ev.Token != rd.Token(i+1) {
			t.Errorf("event %d = %+v, want Failed token %d", i, ev, i+1)
		}
	}
	// Only the oldest datagram has a retransmission timer (no go-back-N):
	// it alone is retried; the others fail with it.
	if got := a.EP.Stats().Retransmits; got != uint64(cfg.MaxRetries) {
		t.Errorf("retransmits %d, want %d", got, cfg.MaxRetries)
	}
	// The link comes back: a new stream works.
	n.Link.Down = false
	a.Queue(b, 10, 11)
	if !n.Run(n.Now.Add(time.Minute), 100_000, func() bool { return a.Count(rd.Acked) == 2 }) {
		t.Fatalf("after link up: acked %d, want 2; events %v; violations %v", a.Count(rd.Acked), a.Events, n.Violations)
	}
	checkClean(t, n)
}

// A receiver with no posted receive for a long time (longer than the whole
// retry budget) makes the sender wait, not fail; everything is delivered
// once it is ready again.
func TestSimReceiverNotReady(t *testing.T) {
	n := rdtest.NewNet(rdtest.LinkConfig{Delay: 50 * time.Microsecond, Loss: 0.02}, 3)
	cfg := rd.DefaultConfig()
	cfg.Window = 16
	a := n.AddNode(cfg, 1)
	b := n.AddNode(cfg, 2)
	notReadyUntil := n.Now.Add(30 * time.Second)
	b.Ready = func(now time.Time) bool { return !now.Before(notReadyUntil) }
	a.Queue(b, tokens(0, 20, 4)...)
	if !n.Run(n.Now.Add(2*time.Minute), 1_000_000, func() bool { return a.Count(rd.Acked) == 80 }) {
		t.Fatalf("acked %d/80, failed %d; a %+v", a.Count(rd.Acked), a.Count(rd.Failed), a.EP.Stats())
	}
	checkClean(t, n)
	if a.Count(rd.Failed) != 0 {
		t.Errorf("failed %d", a.Count(rd.Failed))
	}
	st := a.EP.Stats()
	if st.NotReadyReceived == 0 || b.EP.Stats().NotReadySent == 0 {
		t.Errorf("no NOTREADY exchanged: a %+v", st)
	}
	if a.Events[0].Time.Before(notReadyUntil) {
		t.Errorf("first completion at %v, before the receiver was ready", a.Events[0].Time)
	}
	t.Logf("done %v after ready; a %+v", n.Now.Sub(notReadyUntil), st)
}

// A peer that restarts mid-stream: the other side's outstanding tokens
// end with PeerReset, old-life datagrams arriving late are Stale, and a
// new stream in both directions works.
func TestSimPeerRestart(t *testing.T) {
	n := rdtest.NewNet(rdtest.LinkConfig{Delay: 100 * time.Microsecond, Jitter: 400 * time.Microsecond, Reorder: 0.1}, 11)
	cfg := rd.DefaultConfig()
	cfg.Window = 8
	a := n.AddNode(cfg, 0xA)
	b := n.AddNode(cfg, 0xB)
	a.Queue(b, tokens(0, 50, 4)...)
	b.Queue(a, tokens(0, 50, 4)...)
	if !n.Run(n.Now.Add(time.Minute), 100_000, func() bool { return a.Count(rd.Acked) >= 40 }) {
		t.Fatal("no progress before restart")
	}
	b.Restart(0xB2) // datagrams of B's old life are still in flight
	if !n.Run(n.Now.Add(time.Minute), 100_000, func() bool { return a.Count(rd.PeerReset) > 0 }) {
		t.Fatalf("no PeerReset at a; events %d, stats %+v", len(a.Events), a.EP.Stats())
	}
	stale := a.EP.Stats().Stale + b.EP.Stats().Stale
	// New streams after the restart; a's old queue goes on to b's new life.
	a.Queue(b, tokens(1000, 10, 3)...)
	b.Queue(a, tokens(1000, 10, 3)...)
	bAcked := b.Count(rd.Acked)
	done := func() bool {
		return a.Count(rd.Acked)+a.Count(rd.PeerReset)+a.Count(rd.Failed) == 200+30 && b.Count(rd.Acked) == bAcked+30
	}
	if !n.Run(n.Now.Add(time.Minute), 200_000, done) {
		t.Fatalf("new stream: a acked %d reset %d, b acked %d/30; a %+v b %+v",
			a.Count(rd.Acked), a.Count(rd.PeerReset), b.Count(rd.Acked)-bAcked, a.EP.Stats(), b.EP.Stats())
	}
	checkClean(t, n)
	if a.Count(rd.Failed) != 0 {
		t.Errorf("a failed %d", a.Count(rd.Failed))
	}
	got := b.Delivered[a.Addr]
	if len(got) < 30 || got[len(got)-30] != rd.Token(1000<<20) {
		t.Errorf("b's new life delivered %d tokens, want the last 30 from %d", len(got), 1000<<20)
	}
	if got := len(a.Delivered[b.Addr]); got < 30 {
		t.Errorf("a delivered %d tokens from b's new life... want ≥ 30", got)
	}
	t.Logf("stale seen %d (at restart), a %+v, b %+v", stale, a.EP.Stats(), b.EP.Stats())
}

// Old-life DATA arriving after the restart is known is Stale: nothing of it
// is delivered.
func TestSimStaleOldLife(t *testing.T) {
	n := rdtest.NewNet(rdtest.LinkConfig{Delay: 100 * time.Microsecond}, 5)
	cfg := rd.DefaultConfig()
	a := n.AddNode(cfg, 0xA)
	b := n.AddNode(cfg, 0xB)
	a.Queue(b, 1, 2, 3)
	n.Run(n.Now.Add(time.Second), 10_000, func() bool { return a.Count(rd.Acked) == 3 })
	// a's old life sends more with a long delay, then a restarts and its new
	// life talks to b before the old datagrams land.
	n.Link.Delay = 10 * time.Millisecond
	a.Queue(b, 4, 5)
	n.Step()
	n.Link.Delay = 100 * time.Microsecond
	a.Restart(0xA2)
	a.Queue(b, 100, 101)
	if !n.Run(n.Now.Add(time.Second), 100_000, func() bool {
		return a.Count(rd.Acked) == 5 && n.Now.After(n.Nodes()[0].Events[0].Time.Add(20*time.Millisecond))
	}) {
		t.Fatalf("acked %d; events %v", a.Count(rd.Acked), a.Events)
	}
	checkClean(t, n)
	got := fmt.Sprint(b.Delivered[a.Addr])
	if got != fmt.Sprint([]rd.Token{1, 2, 3, 100, 101}) {
		t.Errorf("b delivered from a %s, want [1 2 3 100 101] (4 and 5 are of a's old life)", got)
	}
	if b.Verdicts[rd.Stale] == 0 {
		t.Errorf("no Stale verdict at b: %v", b.Verdicts)
	}
}

// Idle peers are reclaimed.
func TestSimIdleReclaim(t *testing.T) {
	n := rdtest.NewNet(rdtest.LinkConfig{Delay: 100 * time.Microsecond}, 9)
	cfg := rd.DefaultConfig()
	cfg.IdleTimeout = time.Second
	a := n.AddNode(cfg, 1)
	var peers []*rdtest.Node
	for i := range 10 {
		p := n.AddNode(cfg, uint32(100+i))
		a.Queue(p, 1, 2)
		p.Queue(a, 1)
		peers = append(peers, p)
	}
	n.Run(n.Now.Add(time.Second), 100_000, func() bool { return a.Count(rd.Acked) == 20 })
	if a.EP.Peers() != 10 {
		t.Fatalf("peers %d, want 10", a.EP.Peers())
	}
	n.Run(n.Now.Add(5*time.Second), 100_000, func() bool { return a.EP.Peers() == 0 })
	if a.EP.Peers() != 0 || a.EP.Stats().PeersReclaimed != 10 {
		t.Fatalf("peers %d, reclaimed %d", a.EP.Peers(), a.EP.Stats().PeersReclaimed)
	}
	// Talking again after reclamation works, in both directions.
	for _, p := range peers {
		a.Queue(p, 3)
		p.Queue(a, 2)
	}
	if !n.Run(n.Now.Add(5*time.Second), 100_000, func() bool { return a.Count(rd.Acked) == 30 }) {
		t.Fatalf("after reclaim: acked %d/30; %+v", a.Count(rd.Acked), a.EP.Stats())
	}
	checkClean(t, n)
	for _, p := range peers {
		if got := fmt.Sprint(p.Delivered[a.Addr]); got != "[1 2 3]" {
			t.Errorf("%v delivered %s", p.Addr, got)
		}
	}
	// Half-reclaimed: the sender's send half resets after IdleTimeout while
	// the receiver still has its receive half (it keeps it for 2×).
	if st := peers[0].EP.Stats(); st.NewSpaces == 0 && st.PeersReclaimed == 0 {
		t.Logf("peer stats %+v", st)
	}
}

// A peer reclaimed while it is the one the endpoint looked up last (one
// peer only: Endpoint.peerAt remembers it) gets a fresh state when it
// talks again: the remembered one is forgotten with it, so that the new
// state is in the peer table (timers, sweep, Peers) and a new space.
func TestSimIdleReclaimLastPeer(t *testing.T) {
	n := rdtest.NewNet(rdtest.LinkConfig{Delay: 100 * time.Microsecond}, 11)
	cfg := rd.DefaultConfig()
	cfg.IdleTimeout = time.Second
	a := n.AddNode(cfg, 1)
	b := n.AddNode(cfg, 2)
	for round := range 3 {
		a.Queue(b, rd.Token(10*round+1), rd.Token(10*round+2))
		b.Queue(a, rd.Token(10*round+3))
		want := 2 * (round + 1)
		if !n.Run(n.Now.Add(time.Second), 100_000, func() bool { return a.Count(rd.Acked) == want }) {
			t.Fatalf("round %d: acked %d/%d; %+v", round, a.Count(rd.Acked), want, a.EP.Stats())
		}
		if a.EP.Peers() != 1 || b.EP.Peers() != 1 {
			t.Fatalf("round %d: peers a %d b %d while talking, want 1 each", round, a.EP.Peers(), b.EP.Peers())
		}
		n.Run(n.Now.Add(5*time.Second), 100_000, func() bool { return a.EP.Peers() == 0 && b.EP.Peers() == 0 })
		if a.EP.Peers() != 0 || a.EP.Stats().PeersReclaimed != uint64(round+1) {
			t.Fatalf("round %d: peers %d, reclaimed %d after idling", round, a.EP.Peers(), a.EP.Stats().PeersReclaimed)
		}
	}
	checkClean(t, n)
	if got := fmt.Sprint(b.Delivered[a.Addr]); got != "[1 2 11 12 21 22]" {
		t.Errorf("b delivered %s", got)
	}
	if got := fmt.Sprint(a.Delivered[b.Addr]); got != "[3 13 23]" {
		t.Errorf("a delivered %s", got)
	}
}
