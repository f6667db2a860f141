package rd

import (
	"testing"
	"time"

	"github.com/iwarpd/iwarpd/llp/dgram"
)

// provenPeer makes an endpoint A with a proven peer addrB in steady state
// both ways: A's DATA 1 acknowledged, B's DATA 1 taken (an ACK owed).
func provenPeer(t *testing.T) *Endpoint {
	t.Helper()
	e := NewEndpoint(DefaultConfig(), incA)
	if _, err := e.Send(t0, addrB, 1); err != nil {
		t.Fatal(err)
	}
	e.Receive(t0, addrB, ack(2, 0, 64), true)
	if v := e.Receive(t0, addrB, data(1, incA), true); v != Deliver {
		t.Fatalf("DATA 1: %v", v)
	}
	e.Poll(t0, nil)
	return e
}

// TestFastpathExportImport moves a proven peer's steady state out (its
// owed ACK with it, its timers stopped) and back with two datagrams the
// rank left outstanding: the owed ACK goes out at once, the oldest is
// retransmitted at its RTO with its token, an ACK resolves both.
func TestFastpathExportImport(t *testing.T) {
	e := provenPeer(t)
	ps, ok := e.FastpathExport(t0, 4, nil)
	if !ok || len(ps) != 1 {
		t.Fatalf("export: %v %+v", ok, ps)
	}
	p := ps[0]
	if p.Addr != addrB || p.OurInc != incA || p.PeerInc != incB || !p.MaySend || !p.MayRecv ||
		p.NextSeq != 2 || p.SndUna != 2 || p.AckCum != 2 || p.Limit != 66 || p.RcvNext != 2 || !p.AckDue || p.RTO <= 0 {
		t.Fatalf("exported %+v", p)
	}
	if d, ok := e.NextDeadline(); ok && d.Before(t0.Add(time.Second)) {
		t.Fatalf("a timer at %v after the export: the rank owns the peer's timers", d.Sub(t0))
	}
	// The rank sent DATA 2 and 3, took B's DATA 2 and acknowledged nothing.
	p.NextSeq, p.RcvNext, p.Unacked, p.AckDue = 4, 3, 1, true
	sent := t0.Add(time.Millisecond)
	if err := e.FastpathImport(t0.Add(2*time.Millisecond), p, []FPOut{{100, sent}, {101, sent}}); err != nil {
		t.Fatal(err)
	}
	as := e.Poll(t0.Add(2*time.Millisecond), nil)
	acks := only(t, as, SendAck)
	if len(acks) != 1 || acks[0].Header.CumAck != 3 {
		t.Fatalf("after the import: %v, want the owed ACK of 3", as)
	}
	late := sent.Add(p.RTO + time.Millisecond)
	rt := only(t, e.Poll(late, nil), Retransmit)
	if len(rt) != 1 || rt[0].Token != 100 || rt[0].Header.Seq != 2 {
		t.Fatalf("at the RTO: %+v, want token 100 as 2", rt)
	}
	e.Receive(late, addrB, ack(4, 0, 64), true)
	acked := only(t, e.Poll(late, nil), Acked)
	if len(acked) != 2 || acked[0].Token != 100 || acked[1].Token != 101 {
		t.Fatalf("after the ACK: %+v", acked)
	}
}

// TestFastpathExportRefused: a peer with a datagram outstanding, or held
// out of order, stays with the endpoint: nothing is exported.
func TestFastpathExportRefused(t *testing.T) {
	e := provenPeer(t)
	if _, err := e.Send(t0, addrB, 7); err != nil {
		t.Fatal(err)
	}
	if ps, ok := e.FastpathExport(t0, 4, nil); ok || len(ps) != 0 {
		t.Fatalf("exported %+v with a datagram outstanding", ps)
	}
	e = provenPeer(t)
	h := data(3, incA)
	h.Flags |= dgram.FlagExtSACK
	if v := e.Receive(t0, addrB, h, true); v != Hold {
		t.Fatalf("DATA 3 before 2: %v", v)
	}
	if _, ok := e.FastpathExport(t0, 4, nil); ok {
		t.Fatal("exported a peer holding a datagram out of order")
	}
	if err := e.FastpathImport(t0, FPPeer{Addr: addrA, NextSeq: 1, SndUna: 1}, nil); err == nil {
		t.Fatal("imported an unknown peer")
	}
}

// TestFastpathExportOut: datagrams outstanding (sent once) move out with
// their peer when ok accepts each, oldest first with their send times;
// the endpoint then has none (no retransmission timer); a datagram ok
// refuses, a retransmitted one or more than maxOut keep the peer.
func TestFastpathExportOut(t *testing.T) {
	yes := func(Token) bool { return true }
	e := provenPeer(t)
	for _, tok := range []Token{7, 8} {
		if _, err := e.Send(t0, addrB, tok); err != nil {
			t.Fatal(err)
		}
	}
	if _, ok := e.FastpathExport(t0, 4, nil); ok {
		t.Fatal("FastpathExport let a peer with datagrams outstanding go")
	}
	if _, ok := e.FastpathExportOut(t0, 4, nil, 1, yes); ok {
		t.Fatal("exported two outstanding with room for one")
	}
	if _, ok := e.FastpathExportOut(t0, 4, nil, 16, func(k Token) bool { return k != 8 }); ok {
		t.Fatal("exported a datagram ok refused")
	}
	if !e.FastpathReadyOut(4, 16, yes) || e.FastpathReady(4) {
		t.Fatal("FastpathReadyOut / FastpathReady disagree with the export")
	}
	ps, ok := e.FastpathExportOut(t0, 4, nil, 16, yes)
	if !ok || len(ps) != 1 {
		t.Fatalf("export: %v %+v", ok, ps)
	}
	p := ps[0]
	if p.SndUna != 2 || p.NextSeq != 4 || len(p.Out) != 2 || p.Out[0].Tok != 7 || p.Out[1].Tok != 8 || !p.Out[0].SentAt.Equal(t0) {
		t.Fatalf("exported %+v", p)
	}
	if d, ok := e.NextDeadline(); ok && d.Before(t0.Add(time.Second)) {
		t.Fatalf("a timer at %v after the export: the rank keeps the outstanding datagrams", d.Sub(t0))
	}
	// Back with both still outstanding, under the engine's new tokens.
	if err := e.FastpathImport(t0.Add(time.Millisecond), p, []FPOut{{200, t0}, {201, t0}}); err != nil {
		t.Fatal(err)
	}
	rt := only(t, e.Poll(t0.Add(p.RTO+2*time.Millisecond), nil), Retransmit)
	if len(rt) != 1 || rt[0].Token != 200 || rt[0].Header.Seq != 2 {
		t.Fatalf("at the RTO: %+v, want token 200 as 2", rt)
	}
	// A retransmitted datagram keeps its peer with the endpoint.
	if _, ok := e.FastpathExportOut(t0, 4, nil, 16, yes); ok {
		t.Fatal("exported a retransmitted datagram")
	}
}
