package rdtest

import (
	"testing"
	"time"

	"github.com/iwarpd/iwarpd/llp/dgram"
	"github.com/iwarpd/iwarpd/llp/rd"
)

func run(seed uint64) (*Net, *Node, *Node) {
	n := NewNet(LinkConfig{Loss: 0.1, Duplicate: 0.05, Reorder: 0.1, Delay: 50 * time.Microsecond, Jitter: 50 * time.Microsecond}, seed)
	a := n.AddNode(rd.DefaultConfig(), 1)
	b := n.AddNode(rd.DefaultConfig(), 2)
	for i := 1; i <= 300; i++ {
		a.Queue(b, rd.Token(i))
	}
	n.Run(n.Now.Add(time.Minute), 1_000_000, func() bool { return a.Count(rd.Acked) == 300 })
	return n, a, b
}

// Same seed, same run; the loss rate is what was asked for.
func TestDeterministicAndLossRate(t *testing.T) {
	n1, a1, _ := run(42)
	n2, _, _ := run(42)
	if n1.Sent != n2.Sent || n1.Lost != n2.Lost || !n1.Now.Equal(n2.Now) {
		t.Errorf("runs differ: %d/%d/%v vs %d/%d/%v", n1.Sent, n1.Lost, n1.Now, n2.Sent, n2.Lost, n2.Now)
	}
	if a1.Count(rd.Acked) != 300 || len(n1.Violations) != 0 {
		t.Fatalf("acked %d, violations %v", a1.Count(rd.Acked), n1.Violations)
	}
	rate := float64(n1.Lost) / float64(n1.Sent)
	if rate < 0.05 || rate > 0.15 {
		t.Errorf("loss rate %.3f, want about 0.1", rate)
	}
}

// The checks fire: a second delivery, a delivery out of order.
func TestViolationsDetected(t *testing.T) {
	n := NewNet(LinkConfig{}, 1)
	a := n.AddNode(rd.DefaultConfig(), 1)
	b := n.AddNode(rd.DefaultConfig(), 2)
	b.deliver(a.Addr, 5)
	b.deliver(a.Addr, 5)
	b.deliver(a.Addr, 4)
	if len(n.Violations) != 3 {
		t.Errorf("violations %v, want 3 (twice, not after, not after)", n.Violations)
	}
	// An ACK from a peer we keep no state for changes nothing.
	if v := a.EP.Receive(n.Now, b.Addr, headerAck(), true); v != rd.AckOnly || a.EP.Peers() != 0 {
		t.Errorf("verdict %v, peers %d", v, a.EP.Peers())
	}
}

func headerAck() dgram.RDHeader {
	return dgram.RDHeader{Version: 1, Type: dgram.RDAck, Flags: dgram.FlagAck, Incarnation: 2, EchoedIncarnation: 1, CumAck: 1}
}
