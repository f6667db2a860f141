package rd

import (
	"reflect"
	"testing"
	"time"

	"github.com/iwarpd/iwarpd/llp/dgram"
)

// Config.AckedRuns judged against the per-token Acked actions: twin
// endpoints with the same history, one reporting each acknowledged token
// alone, one reporting runs of consecutive tokens as one action (N); the
// runs, expanded, must be the per-token actions exactly — same kinds,
// tokens, peers, headers, in the same order — and the state (counters,
// next deadline, CanSend) the same.

// expand returns as with every Acked run replaced by its tokens, one
// per-token action each (N 0), and how many runs of two or more it held.
func expand(as []Action) ([]Action, int) {
	var out []Action
	runs := 0
	for _, a := range as {
		if a.Kind != Acked || a.N == 0 {
			out = append(out, a)
			continue
		}
		if a.N > 1 {
			runs++
		}
		for i := range a.N {
			b := a
			b.N, b.Token = 0, a.Token+Token(i)
			out = append(out, b)
		}
	}
	return out, runs
}

// ackTwins are two endpoints with the same history: each reports Acked
// per token, runs with AckedRuns.
type ackTwins struct {
	each, runs *Endpoint
	merged     int // Acked runs of two or more seen
}

func newAckTwins(cfg Config) *ackTwins {
	cfg.AckedRuns = false
	each := NewEndpoint(cfg, incA)
	cfg.AckedRuns = true
	return &ackTwins{each: each, runs: NewEndpoint(cfg, incA)}
}

// send sends n datagrams from tok on by SendRun at both and checks the
// headers agree.
func (tw *ackTwins) send(t *testing.T, what string, now time.Time, tok Token, n int) {
	t.Helper()
	a, errA := tw.each.SendRun(now, addrB, tok, n)
	b, errB := tw.runs.SendRun(now, addrB, tok, n)
	if (errA == nil) != (errB == nil) || !reflect.DeepEqual(runHeaders(a), runHeaders(b)) {
		t.Fatalf("%s: SendRun %+v %v, per-token twin's %+v %v", what, runHeaders(b), errB, runHeaders(a), errA)
	}
}

// recv gives both the datagram h from addrB.
func (tw *ackTwins) recv(t *testing.T, what string, now time.Time, h dgram.RDHeader) {
	t.Helper()
	if a, b := tw.each.Receive(now, addrB, h, true), tw.runs.Receive(now, addrB, h, true); a != b {
		t.Fatalf("%s: verdict %v, per-token twin's %v", what, b, a)
	}
}

// poll polls both and checks that the actions, runs expanded, and the
// state agree; it returns the per-token actions.
func (tw *ackTwins) poll(t *testing.T, what string, now time.Time) []Action {
	t.Helper()
	a := tw.each.Poll(now, nil)
	b, runs := expand(tw.runs.Poll(now, nil))
	tw.merged += runs
	if !reflect.DeepEqual(a, b) {
		t.Fatalf("%s: actions, runs expanded\n%+v\nper token\n%+v", what, b, a)
	}
	if sa, sb := tw.each.Stats(), tw.runs.Stats(); sa != sb {
		t.Fatalf("%s: stats %+v, per-token twin's %+v", what, sb, sa)
	}
	da, oka := tw.each.NextDeadline()
	db, okb := tw.runs.NextDeadline()
	if oka != okb || !da.Equal(db) {
		t.Fatalf("%s: next deadline %v %v, per-token twin's %v %v", what, db, okb, da, oka)
	}
	if ca, cb := tw.each.CanSend(addrB), tw.runs.CanSend(addrB); ca != cb {
		t.Fatalf("%s: CanSend %v, per-token twin's %v", what, cb, ca)
	}
	return a
}

// TestAckedRunsEqualAcked: cumulative ACKs over runs (of one message and
// across messages: a run ends where the tokens stop being consecutive),
// datagrams lost in the middle and SACKed beyond, their retransmissions
// acknowledged later, SACK Blocks, NOTREADY, a reordered (old) ACK, and
// a peer that restarts with datagrams outstanding (PeerReset per token).
func TestAckedRunsEqualAcked(t *testing.T) {
	us := func(n int) time.Time { return t0.Add(time.Duration(n) * time.Microsecond) }
	cfg := DefaultConfig()
	cfg.Window = 128
	tw := newAckTwins(cfg)
	tw.send(t, "message 1", us(0), 1<<24, 20)   // seqs 1..20
	tw.send(t, "message 2", us(0), 2<<24, 20)   // seqs 21..40
	tw.send(t, "message 3", us(0), 3<<24+5, 30) // seqs 41..70: a run from segment 5
	// 1..10 arrived, 11..14 lost, 15..40 SACKed (bit i: seq 12+i).
	var sack uint32
	for s := uint32(15); s <= 40; s++ {
		sack |= 1 << (s - 12)
	}
	tw.recv(t, "ack 11", us(100), ack(11, sack, 500))
	if acts := only(t, tw.poll(t, "ack 11", us(100)), Acked); len(acts) != 10 || acts[0].Token != 1<<24 {
		t.Fatalf("acked %+v", acts)
	}
	re := only(t, tw.poll(t, "reordering window", us(3000)), Retransmit)
	if len(re) != 4 {
		t.Fatalf("retransmissions %+v, want seqs 11..14", re)
	}
	tw.recv(t, "old ack", us(3100), ack(5, 0, 500)) // reordered: older than what is known
	tw.poll(t, "old ack", us(3100))
	// The holes repaired: everything up to 45 at once (two messages and
	// the start of the third: three runs).
	tw.recv(t, "ack 46", us(3200), ack(46, 0b101, 500)) // 47, 49 SACKed
	if acts := only(t, tw.poll(t, "ack 46", us(3200)), Acked); len(acts) != 35 {
		t.Fatalf("acked %d, want 35 (11..45)", len(acts))
	}
	// A SACK Block beyond, then NOTREADY at 46.
	blk := ack(46, 0b1111, 500)
	blk.Flags |= dgram.FlagSACKBlock
	blk.Seq = 52
	tw.recv(t, "sack block", us(3300), blk)
	tw.poll(t, "sack block", us(3300))
	nr := ack(46, 0, 500)
	nr.Flags |= dgram.FlagNotReady
	tw.recv(t, "not ready", us(3400), nr)
	tw.poll(t, "not ready", us(3400))
	tw.poll(t, "back-off", us(3400+int(cfg.NotReadyBackoff/time.Microsecond)+10))
	tw.recv(t, "ack 60", us(6000), ack(60, 0, 500))
	tw.poll(t, "ack 60", us(6000))
	// More after a gap in the tokens, acknowledged with what is left.
	tw.send(t, "message 4", us(6100), 9<<24, 8) // seqs 71..78
	tw.recv(t, "ack 79", us(6200), ack(79, 0, 500))
	if acts := only(t, tw.poll(t, "ack 79", us(6200)), Acked); len(acts) != 19 {
		t.Fatalf("acked %d, want 19 (60..78)", len(acts))
	}
	// Outstanding when the peer restarts: PeerReset per token, as before.
	tw.send(t, "message 5", us(6300), 10<<24, 6)
	tw.recv(t, "ack 80", us(6400), ack(81, 0, 500)) // 79, 80 acked
	reset := dgram.RDHeader{Version: dgram.RDVersion, Type: dgram.RDAck, Flags: dgram.FlagReset, Incarnation: incB + 1, EchoedIncarnation: incA, CumAck: incB}
	tw.recv(t, "reset", us(6500), reset)
	if acts := only(t, tw.poll(t, "reset", us(6500)), PeerReset); len(acts) != 4 {
		t.Fatalf("peer resets %+v, want the 4 outstanding", acts)
	}
	tw.poll(t, "later", us(200000))
	if tw.merged == 0 {
		t.Fatal("no Acked action covered more than one token: the test compared nothing")
	}
}
