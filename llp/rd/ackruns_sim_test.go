package rd_test

import (
	"reflect"
	"testing"
	"time"

	"github.com/iwarpd/iwarpd/llp/rd"
	"github.com/iwarpd/iwarpd/llp/rd/rdtest"
)

// TestSimAckedRunsEqualAcked: the same simulated exchange (both ways,
// messages of several datagrams, seeded loss, duplicates, reordering and
// jitter: SACKs, fast retransmissions, timeouts) run twice, once with
// Config.AckedRuns: every action of every node, its Acked runs expanded
// token by token, must be the per-token run's at the same virtual time,
// and the counters and completions the same.
func TestSimAckedRunsEqualAcked(t *testing.T) {
	links := []rdtest.LinkConfig{
		{Delay: 50 * time.Microsecond},
		{Loss: 0.05, Delay: 50 * time.Microsecond, Jitter: 20 * time.Microsecond},
		{Loss: 0.02, Duplicate: 0.05, Reorder: 0.1, Delay: 50 * time.Microsecond, Jitter: 100 * time.Microsecond},
		{Loss: 0.2, Delay: 50 * time.Microsecond, Jitter: 50 * time.Microsecond}, // timeouts too
	}
	type logged struct {
		at time.Time
		a  rd.Action
	}
	run := func(link rdtest.LinkConfig, seed uint64, runs bool) (logs [2][]logged, nodes [2]*rdtest.Node, merged int) {
		n := rdtest.NewNet(link, seed)
		cfg := rd.DefaultConfig()
		cfg.Window = 32
		cfg.AckedRuns = runs
		a, b := n.AddNode(cfg, 0xA1), n.AddNode(cfg, 0xB1)
		nodes = [2]*rdtest.Node{a, b}
		for i, nd := range nodes {
			nd.Log = func(now time.Time, x *rd.Action) {
				if x.Kind == rd.Acked && x.N > 1 {
					merged++
				}
				if x.Kind != rd.Acked || x.N == 0 {
					logs[i] = append(logs[i], logged{now, *x})
					return
				}
				for j := range x.N {
					y := *x
					y.N, y.Token = 0, x.Token+rd.Token(j)
					logs[i] = append(logs[i], logged{now, y})
				}
			}
		}
		a.Queue(b, tokens(0, 60, 7)...)
		b.Queue(a, tokens(0, 30, 3)...)
		done := func() bool { return a.Count(rd.Acked) == 60*7 && b.Count(rd.Acked) == 30*3 }
		if !n.Run(n.Now.Add(time.Minute), 2_000_000, done) {
			t.Fatalf("runs %v: not done: a acked %d, b acked %d", runs, a.Count(rd.Acked), b.Count(rd.Acked))
		}
		checkClean(t, n)
		return logs, nodes, merged
	}
	for i, link := range links {
		seed := uint64(i + 11)
		logsA, nodesA, _ := run(link, seed, false)
		logsB, nodesB, merged := run(link, seed, true)
		if merged == 0 {
			t.Fatalf("link %d: no Acked action covered more than one token", i)
		}
		for k := range nodesA {
			if !reflect.DeepEqual(logsA[k], logsB[k]) {
				j := 0
				for j < min(len(logsA[k]), len(logsB[k])) && reflect.DeepEqual(logsA[k][j], logsB[k][j]) {
					j++
				}
				t.Fatalf("link %d node %d: actions differ from %d of %d/%d", i, k, j, len(logsA[k]), len(logsB[k]))
			}
			if sa, sb := nodesA[k].EP.Stats(), nodesB[k].EP.Stats(); sa != sb {
				t.Fatalf("link %d node %d: stats %+v, per token %+v", i, k, sb, sa)
			}
			if !reflect.DeepEqual(nodesA[k].Events, nodesB[k].Events) {
				t.Fatalf("link %d node %d: completions differ", i, k)
			}
		}
		t.Logf("link %d: %d actions at a, %d runs of two or more, %+v", i, len(logsA[0]), merged, nodesA[0].EP.Stats())
	}
}
