package rd_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/iwarpd/iwarpd/llp/rd"
	"github.com/iwarpd/iwarpd/llp/rd/rdtest"
)

// restartPhase says when a node restarts in TestSimRestartPhases.
type restartPhase int

const (
	beforeAck restartPhase = iota // the receiver took DATA, no ACK reached the sender yet
	afterAck                      // everything acknowledged, the pair idle; new DATA follows
	midWindow                     // a window of DATA outstanding
)

func (p restartPhase) String() string {
	return [...]string{"before-ack", "after-ack", "mid-window"}[p]
}

// resolved counts the terminal events of n.
func resolved(n *rdtest.Node) int {
	return n.Count(rd.Acked) + n.Count(rd.Failed) + n.Count(rd.PeerReset)
}

// checkOutcomes checks that every token of src to dst has at most one
// terminal event and that an Acked one was delivered to some life of dst
// (the harness also checks that no life took a token twice or out of
// order).
func checkOutcomes(t *testing.T, n *rdtest.Net, src, dst *rdtest.Node) {
	t.Helper()
	seen := make(map[rd.Token]rd.ActionKind)
	for _, ev := range src.Events {
		if ev.Peer != dst.Addr || ev.Life != src.Lives {
			continue
		}
		if k, dup := seen[ev.Token]; dup {
			t.Errorf("%v token %#x: %v after %v", src.Addr, ev.Token, ev.Kind, k)
		}
		seen[ev.Token] = ev.Kind
		if ev.Kind == rd.Acked && !n.DeliveredEver(src, dst, ev.Token) {
			t.Errorf("%v token %#x acked, never delivered", src.Addr, ev.Token)
		}
	}
}

// A peer restarts on the same address at each phase of a stream, both
// directions busy, over a lossy, duplicating, reordering link, for many
// seeds: no token is acknowledged unless its receiver took it (once per
// life, in order), every token ends exactly once, and afterwards both
// directions work with no failure at all. Run for the receiver restarting
// and for the sender restarting.
func TestSimRestartPhases(t *testing.T) {
	link := rdtest.LinkConfig{Loss: 0.05, Duplicate: 0.05, Reorder: 0.1, Delay: 100 * time.Microsecond, Jitter: 200 * time.Microsecond}
	seeds := 25
	if testing.Short() {
		seeds = 5
	}
	for _, phase := range []restartPhase{beforeAck, afterAck, midWindow} {
		for _, senderRestarts := range []bool{false, true} {
			name := fmt.Sprintf("%v/receiver", phase)
			if senderRestarts {
				name = fmt.Sprintf("%v/sender", phase)
			}
			t.Run(name, func(t *testing.T) {
				for seed := 1; seed <= seeds; seed++ {
					restartRun(t, link, uint64(seed), phase, senderRestarts)
					if t.Failed() {
						t.Fatalf("seed %d", seed)
					}
				}
			})
		}
	}
}

func restartRun(t *testing.T, link rdtest.LinkConfig, seed uint64, phase restartPhase, senderRestarts bool) {
	n := rdtest.NewNet(link, seed)
	cfg := rd.DefaultConfig()
	cfg.Window = 8
	cfg.MaxRetries = 30 // loss must not end anything: only the restart may
	a := n.AddNode(cfg, 0xA0+uint32(seed))
	b := n.AddNode(cfg, 0xB0+uint32(seed))
	limit := n.Now.Add(time.Minute)
	switch phase {
	case beforeAck:
		a.Queue(b, tokens(0, 10, 3)...)
		b.Queue(a, tokens(0, 10, 3)...)
		n.Run(limit, 100_000, func() bool { return len(b.Delivered[a.Addr]) > 0 || a.Count(rd.Acked) > 0 })
	case afterAck:
		a.Queue(b, tokens(0, 10, 3)...)
		b.Queue(a, tokens(0, 10, 3)...)
		if !n.Run(limit, 200_000, func() bool { return a.Count(rd.Acked) == 30 && b.Count(rd.Acked) == 30 }) {
			t.Fatalf("seed %d: first batch not acked: %d %d", seed, a.Count(rd.Acked), b.Count(rd.Acked))
		}
		n.Run(n.Now.Add(5*time.Millisecond), 100_000, nil) // let the delayed ACKs go
	case midWindow:
		a.Queue(b, tokens(0, 100, 3)...)
		b.Queue(a, tokens(0, 100, 3)...)
		n.Run(limit, 200_000, func() bool { return a.Count(rd.Acked) >= 60 && b.Count(rd.Acked) >= 60 })
	}
	// The restart: the restarted node's old queue and state are gone; the
	// other side's outstanding tokens must each end exactly once.
	other, restarted := a, b
	if senderRestarts {
		other, restarted = b, a
	}
	restarted.Restart(0xC0 + uint32(seed))
	// New traffic both ways, the new life's first.
	restarted.Queue(other, tokens(5000, 5, 2)...)
	other.Queue(restarted, tokens(1000, 5, 2)...)
	queued := func(nd *rdtest.Node) int { return nd.Queued() }
	if !n.Run(n.Now.Add(time.Minute), 1_000_000, func() bool {
		return queued(a) == 0 && queued(b) == 0 && !busy(a) && !busy(b)
	}) {
		t.Fatalf("seed %d: after the restart: a queued %d resolved %d, b queued %d resolved %d\na %+v\nb %+v",
			seed, a.Queued(), resolved(a), b.Queued(), resolved(b), a.EP.Stats(), b.EP.Stats())
	}
	// Then everything works, with no failure at all.
	aOK, bOK := a.Count(rd.Acked), b.Count(rd.Acked)
	aBad, bBad := a.Count(rd.Failed)+a.Count(rd.PeerReset), b.Count(rd.Failed)+b.Count(rd.PeerReset)
	a.Queue(b, tokens(9000, 10, 2)...)
	b.Queue(a, tokens(9000, 10, 2)...)
	if !n.Run(n.Now.Add(time.Minute), 1_000_000, func() bool { return a.Count(rd.Acked) == aOK+20 && b.Count(rd.Acked) == bOK+20 }) {
		t.Fatalf("seed %d: after settling: a acked %d/20, b acked %d/20", seed, a.Count(rd.Acked)-aOK, b.Count(rd.Acked)-bOK)
	}
	if a.Count(rd.Failed)+a.Count(rd.PeerReset) != aBad || b.Count(rd.Failed)+b.Count(rd.PeerReset) != bBad {
		t.Errorf("seed %d: failures after settling", seed)
	}
	if a.Count(rd.Failed)+b.Count(rd.Failed) != 0 {
		t.Errorf("seed %d: retry exceeded: a %d b %d", seed, a.Count(rd.Failed), b.Count(rd.Failed))
	}
	checkClean(t, n)
	checkOutcomes(t, n, a, b)
	checkOutcomes(t, n, b, a)
	// The last batch reached the current lives, in order.
	for _, pr := range [][2]*rdtest.Node{{a, b}, {b, a}} {
		got := pr[1].Delivered[pr[0].Addr]
		if len(got) < 20 || fmt.Sprint(got[len(got)-20:]) != fmt.Sprint(tokens(9000, 10, 2)) {
			t.Errorf("seed %d: %v delivered from %v: ...%v", seed, pr[1].Addr, pr[0].Addr, got[max(0, len(got)-20):])
		}
	}
}

// busy reports whether nd's endpoint still has DATA outstanding (a timer
// other than the idle sweep).
func busy(nd *rdtest.Node) bool {
	return nd.Outstanding() > 0
}

// Both sides hit retry-exceeded on a dead link: each renews its own space
// only, so the first messages after the link comes back are delivered and
// acknowledged — no PeerReset on either side.
func TestSimBothFailThenRecover(t *testing.T) {
	n := rdtest.NewNet(rdtest.LinkConfig{Delay: 50 * time.Microsecond}, 21)
	cfg := rd.DefaultConfig()
	cfg.MaxRetries = 4
	a := n.AddNode(cfg, 0xA)
	b := n.AddNode(cfg, 0xB)
	a.Queue(b, 1, 2)
	b.Queue(a, 1, 2)
	if !n.Run(n.Now.Add(time.Second), 10_000, func() bool { return a.Count(rd.Acked) == 2 && b.Count(rd.Acked) == 2 }) {
		t.Fatal("no start")
	}
	n.Link.Down = true
	a.Queue(b, 3, 4)
	b.Queue(a, 3, 4)
	if !n.Run(n.Now.Add(time.Minute), 100_000, func() bool { return a.Count(rd.Failed) == 2 && b.Count(rd.Failed) == 2 }) {
		t.Fatalf("failed a %d b %d", a.Count(rd.Failed), b.Count(rd.Failed))
	}
	n.Link.Down = false
	a.Queue(b, 5, 6, 7)
	b.Queue(a, 5, 6, 7)
	if !n.Run(n.Now.Add(time.Minute), 100_000, func() bool { return a.Count(rd.Acked) == 5 && b.Count(rd.Acked) == 5 }) {
		t.Fatalf("after recovery: acked a %d b %d, reset a %d b %d", a.Count(rd.Acked), b.Count(rd.Acked), a.Count(rd.PeerReset), b.Count(rd.PeerReset))
	}
	if a.Count(rd.PeerReset)+b.Count(rd.PeerReset) != 0 {
		t.Errorf("PeerReset after recovery: a %d b %d", a.Count(rd.PeerReset), b.Count(rd.PeerReset))
	}
	checkClean(t, n)
	for _, pr := range [][2]*rdtest.Node{{a, b}, {b, a}} {
		if got := fmt.Sprint(pr[1].Delivered[pr[0].Addr]); got != "[1 2 5 6 7]" {
			t.Errorf("%v delivered %s", pr[1].Addr, got)
		}
	}
}
