package rd

import (
	"bytes"
	"fmt"
	"net/netip"
	"testing"
	"time"

	"github.com/iwarpd/iwarpd/ddp"
	"github.com/iwarpd/iwarpd/internal/shm"
	"github.com/iwarpd/iwarpd/llp/dgram"
	"github.com/iwarpd/iwarpd/llp/rd"
	"github.com/iwarpd/iwarpd/proto"
	"github.com/iwarpd/iwarpd/rdmap"
	"github.com/iwarpd/iwarpd/verbsd/config"
	"github.com/iwarpd/iwarpd/verbsd/rnic"
	"github.com/iwarpd/iwarpd/verbsd/ud"
)

// llp/rd's AckedRuns through the engine (send.go action, resolveAcked):
// two RD QPs with the same work requests and Read Responses outstanding,
// one whose endpoint reports Acked per datagram, one per run, given the
// same acknowledgements — datagrams lost in the middle and SACKed
// beyond, their retransmissions, NOTREADY, the rest at once — must keep
// the same state (acked, resolved, done, completed per work request;
// resolved per response) and post the same completions, octet for octet,
// after every pass (poll, complete).

const ackPeerInc = 0xBEEF

var ackPeer = netip.MustParseAddrPort("10.4.0.2:30002")

// ackRig is an engine and an RD QP with a send CQ of its own.
type ackRig struct {
	e     *Engine
	q     *QP
	cqMem []byte
	prod  *shm.Producer
	runs  int // Acked actions of more than one datagram the endpoint reported
}

func newAckRig(t testing.TB, runs bool) *ackRig {
	t.Helper()
	cfg := config.DefaultConfig()
	e := &Engine{Engine: ud.NewEngine(&rnic.Engine{Cfg: &cfg})}
	st := newRDState(&cfg.RD, cfg.DatagramSize, 0, nil)
	link := cfg.RD.Link
	link.Window = 1024
	link.AckedRuns = runs
	link.CookieKey = [16]byte{4, 5, 6}
	st.ep = rd.NewEndpoint(link, 0xACED)
	const depth = 64
	mem := make([]byte, proto.RingBytes(depth, proto.CQESize))
	ring, err := shm.NewRing(mem, proto.RingCQ, depth, proto.CQESize, true)
	if err != nil {
		t.Fatal(err)
	}
	prod := shm.NewProducer(ring)
	cq := &rnic.CQ{Depth: depth, Ring: ring, Prod: prod}
	q := &QP{QP: &ud.QP{QP: &rnic.QP{Session: &rnic.Session{}, SendCQ: cq, State: proto.QPStateRTS, Type: proto.QPTypeRD, QPN: 7},
		Qkey: 0x1111}, Rd: st}
	st.setPeerKey(ackPeer, 0x2222)
	return &ackRig{e: e, q: q, cqMem: mem, prod: prod}
}

// post makes a work request of n datagrams, sent, outstanding.
func (g *ackRig) post(t testing.TB, seq uint64, op proto.SendOpcode, n int, signaled bool) *wr {
	t.Helper()
	segs, err := ddp.UntaggedSegments(uint8(rdmap.MakeControl(rdmap.OpSend)), 0, rdmap.QNSend, uint32(seq), uint32(n*1000), 1000)
	if err != nil || segs.Count() != uint32(n) {
		t.Fatalf("segments of %d: %d %v", n, segs.Count(), err)
	}
	w := &wr{seq: seq, wrid: 100 + seq, op: op, signaled: signaled, peer: ackPeer, total: n * 1000, segs: segs}
	g.q.Rd.wrs = append(g.q.Rd.wrs, w)
	return w
}

// send hands n datagrams of tokens tok.. to the endpoint (a run).
func (g *ackRig) send(t testing.TB, now time.Time, tok rd.Token, n int) {
	t.Helper()
	r, err := g.q.Rd.ep.SendRun(now, ackPeer, tok, n)
	if err != nil || r.N != n {
		t.Fatalf("SendRun %d from %#x: %d, %v", n, tok, r.N, err)
	}
}

// ackH is an ACK of the peer acknowledging up to cum (exclusive) and
// the SACK bits.
func ackH(cum, sack uint32) dgram.RDHeader {
	return dgram.RDHeader{Version: dgram.RDVersion, Type: dgram.RDAck, Flags: dgram.FlagAck, Window: 1000,
		Incarnation: ackPeerInc, EchoedIncarnation: 0xACED, CumAck: cum, SACK: sack}
}

// pass runs what a service does with the acknowledgements: the actions
// of the endpoint, then the completions.
func (g *ackRig) pass(now time.Time) {
	r := g.q.Rd
	r.actions = r.ep.Poll(now, r.actions[:0])
	for i := range r.actions {
		if a := &r.actions[i]; a.Kind == rd.Acked && a.N > 1 {
			g.runs++
		}
		g.e.action(g.q, &r.actions[i], now)
	}
	g.e.complete(g.q)
}

// state renders what the completions depend on.
func (g *ackRig) state() string {
	r := g.q.Rd
	var b bytes.Buffer
	for _, w := range r.wrs {
		fmt.Fprintf(&b, "wr %d: sent %d acked %d resolved %d done %v status %v completed %v\n",
			w.seq, w.sent, w.acked, w.resolved, w.done, w.status, w.completed)
	}
	for _, p := range r.resps {
		fmt.Fprintf(&b, "resp %d: sent %d resolved %d dead %v\n", p.seq, p.sent, p.resolved, p.dead)
	}
	fmt.Fprintf(&b, "retx %d acks %d stats %+v", len(r.retx), len(r.acks), r.ep.Stats())
	return b.String()
}

func TestAckedRunsEngineEqual(t *testing.T) {
	us := func(n int) time.Time { return runT0.Add(time.Duration(n) * time.Microsecond) }
	rigs := [2]*ackRig{newAckRig(t, false), newAckRig(t, true)}
	// Work requests (seq, datagrams), a Read Response between them, sent
	// in this order: seqs 1..7, 8, 9..14, 15..26, 27..29, 30..49, 50..55.
	type item struct {
		seq    uint64
		op     proto.SendOpcode
		n      int
		signal bool
		resp   bool
	}
	items := []item{{1, proto.WRSend, 7, true, false}, {2, proto.WRSend, 1, true, false}, {1, 0, 6, false, true},
		{3, proto.WRWriteRecord, 12, true, false}, {4, proto.WRSend, 3, false, false}, {5, proto.WRSend, 20, true, false},
		{6, proto.WRSendWithImm, 6, true, false}}
	for _, g := range rigs {
		for _, it := range items {
			if it.resp {
				segs, _ := ddp.UntaggedSegments(0, 0, 0, 0, uint32(it.n*1000), 1000)
				g.q.Rd.resps = append(g.q.Rd.resps, &resp{seq: it.seq, peer: ackPeer, segs: segs, sent: uint32(it.n)})
				g.send(t, us(0), makeToken(tokResp, it.seq, 0), it.n)
				continue
			}
			w := g.post(t, it.seq, it.op, it.n, it.signal)
			w.sent = uint32(it.n)
			g.send(t, us(0), makeToken(tokWR, it.seq, 0), it.n)
		}
	}
	step := func(what string, now time.Time, h *dgram.RDHeader) {
		t.Helper()
		for _, g := range rigs {
			if h != nil {
				g.q.Rd.ep.Receive(now, ackPeer, *h, true)
			}
			g.pass(now)
		}
		a, b := rigs[0].state(), rigs[1].state()
		if a != b {
			t.Fatalf("%s: runs\n%s\nper datagram\n%s", what, b, a)
		}
		if !bytes.Equal(rigs[0].cqMem, rigs[1].cqMem) {
			t.Fatalf("%s: the completions differ", what)
		}
	}
	sackOf := func(cum, lo, hi uint32) uint32 { // SACK bits of seqs lo..hi (bit i: cum+1+i)
		var s uint32
		for q := lo; q <= hi && q-cum-1 < 32; q++ {
			s |= 1 << (q - cum - 1)
		}
		return s
	}
	h := ackH(5, 0) // 1..4: the first work request half acked
	step("ack 5", us(100), &h)
	h = ackH(10, sackOf(10, 13, 40)) // 10, 11, 12 lost; 13..40 SACKed
	step("ack 10", us(200), &h)
	step("reordering window", us(3000), nil) // 10..12 resent
	h = ackH(12, sackOf(12, 13, 44))         // 10, 11 repaired
	step("ack 12", us(3100), &h)
	h = ackH(12, 0)
	h.Flags |= dgram.FlagNotReady
	step("not ready", us(3200), &h)
	step("back-off", us(5000), nil)
	h = ackH(56, 0) // everything
	step("ack 56", us(5100), &h)
	if n := len(rigs[0].q.Rd.wrs) + len(rigs[0].q.Rd.resps); n != 0 {
		t.Fatalf("%d work requests or responses left:\n%s", n, rigs[0].state())
	}
	if rigs[1].runs == 0 || rigs[0].runs != 0 {
		t.Fatalf("Acked runs: %d with AckedRuns, %d without: the test compared nothing", rigs[1].runs, rigs[0].runs)
	}
	if c := rigs[0].prod.Free(); c != 64-5 {
		t.Fatalf("%d completions, want the 5 signaled", 64-c)
	}
}
