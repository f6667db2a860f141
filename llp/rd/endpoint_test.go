package rd

import (
	"errors"
	"net/netip"
	"testing"
	"time"

	"github.com/iwarpd/iwarpd/llp/dgram"
)

var (
	t0    = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	addrA = netip.MustParseAddrPort("10.0.0.1:4791")
	addrB = netip.MustParseAddrPort("10.0.0.2:4791")
)

const incA, incB = 0xAAAA, 0xBBBB

// cookieB is the cookie of addrB at an endpoint of incarnation incA (no
// CookieKey: the key derives from the incarnation).
var cookieB = NewEndpoint(Config{}, incA).Cookie(addrB)

// data is DATA from addrB (incarnation incB) carrying its cookie, so that
// it is taken from a new address (cookie.go).
func data(seq uint32, echo uint32) dgram.RDHeader {
	return dgram.RDHeader{Version: dgram.RDVersion, Type: dgram.RDData, Incarnation: incB, EchoedIncarnation: echo, Seq: seq, CumAck: cookieB}
}

func ack(cum, sack uint32, window uint16) dgram.RDHeader {
	return dgram.RDHeader{Version: dgram.RDVersion, Type: dgram.RDAck, Flags: dgram.FlagAck, Window: window,
		Incarnation: incB, EchoedIncarnation: incA, CumAck: cum, SACK: sack}
}

func kinds(as []Action) []ActionKind {
	var k []ActionKind
	for _, a := range as {
		k = append(k, a.Kind)
	}
	return k
}

func only(t *testing.T, as []Action, kind ActionKind) []Action {
	t.Helper()
	var r []Action
	for _, a := range as {
		if a.Kind == kind {
			r = append(r, a)
		}
	}
	return r
}

func TestSendAssignsSequence(t *testing.T) {
	cfg := DefaultConfig()
	cfg.Window = 3
	e := NewEndpoint(cfg, incA)
	for i := uint32(1); i <= 3; i++ {
		if !e.CanSend(addrB) {
			t.Fatalf("CanSend false before %d", i)
		}
		h, err := e.Send(t0, addrB, Token(i*10))
		if err != nil {
			t.Fatal(err)
		}
		want := dgram.RDHeader{Version: 1, Type: dgram.RDData, Flags: dgram.FlagExtSACK, Incarnation: incA, Seq: i}
		if i == 3 {
			want.Flags |= dgram.FlagAckReq // window now full
		}
		if h != want {
			t.Errorf("send %d: header %+v, want %+v", i, h, want)
		}
	}
	if e.CanSend(addrB) {
		t.Error("CanSend true with the window full")
	}
	if _, err := e.Send(t0, addrB, 99); !errors.Is(err, ErrWindowClosed) {
		t.Errorf("Send on a full window: %v, want ErrWindowClosed", err)
	}
	if d, ok := e.NextDeadline(); !ok || !d.Equal(t0.Add(cfg.InitialRTO)) {
		t.Errorf("NextDeadline %v %v, want %v", d, ok, t0.Add(cfg.InitialRTO))
	}
	// Cumulative ack of 1 and 2: Acked in order, window reopens.
	if v := e.Receive(t0.Add(time.Millisecond), addrB, ack(3, 0, 3), true); v != AckOnly {
		t.Fatalf("verdict %v", v)
	}
	acts := e.Poll(t0.Add(time.Millisecond), nil)
	if len(acts) != 2 || acts[0].Kind != Acked || acts[0].Token != 10 || acts[1].Token != 20 {
		t.Fatalf("actions %+v, want Acked 10, 20", acts)
	}
	if !e.CanSend(addrB) {
		t.Error("window did not reopen")
	}
	// Piggybacked acks echo the peer's incarnation once it is known.
	e.Receive(t0.Add(time.Millisecond), addrB, data(1, incA), true)
	h, _ := e.Send(t0.Add(time.Millisecond), addrB, 40)
	if h.Flags&dgram.FlagAck == 0 || h.CumAck != 2 || h.EchoedIncarnation != incB || h.Seq != 4 {
		t.Errorf("piggyback header %+v", h)
	}
	if got := only(t, e.Poll(t0.Add(time.Second), nil), SendAck); len(got) != 0 {
		t.Errorf("standalone ACK after piggyback: %+v", got)
	}
}

func TestReceiveVerdicts(t *testing.T) {
	cfg := DefaultConfig()
	cfg.Window = 8
	cfg.ReorderLimit = 8
	cases := []struct {
		name    string
		pre     []uint32 // in-order setup deliveries (seqs)
		h       dgram.RDHeader
		ready   bool
		want    Verdict
		wantAck bool // an immediate ACK (FlagAck) is queued
	}{
		{"first in order", nil, data(1, 0), true, Deliver, false},
		{"in order after 2", []uint32{1, 2}, data(3, incA), true, Deliver, false},
		{"duplicate", []uint32{1, 2}, data(1, incA), true, Duplicate, true},
		{"out of order", nil, data(3, 0), true, Hold, true},
		{"beyond window", nil, data(10, 0), true, Dropped, true},
		{"not ready", nil, data(1, 0), false, NotReady, true},
		{"not ready out of order", nil, data(2, 0), false, NotReady, false},
		{"stale echo", nil, data(1, 0x1234), true, Stale, false},
		{"zero incarnation", nil, dgram.RDHeader{Version: 1, Type: dgram.RDData, Seq: 1}, true, Dropped, false},
		{"bad version", nil, dgram.RDHeader{Version: 2, Type: dgram.RDData, Incarnation: 1, Seq: 1}, true, Dropped, false},
		{"bad type", nil, dgram.RDHeader{Version: 1, Type: 7, Incarnation: 1, Seq: 1}, true, Dropped, false},
		{"ack for other life", nil, dgram.RDHeader{Version: 1, Type: dgram.RDAck, Flags: dgram.FlagAck, Incarnation: incB, EchoedIncarnation: 77}, true, Stale, false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			e := NewEndpoint(cfg, incA)
			for _, s := range tc.pre {
				if v := e.Receive(t0, addrB, data(s, 0), true); v != Deliver {
					t.Fatalf("setup %d: %v", s, v)
				}
			}
			e.Poll(t0.Add(time.Second), nil)
			now := t0.Add(2 * time.Second)
			if v := e.Receive(now, addrB, tc.h, tc.ready); v != tc.want {
				t.Fatalf("verdict %v, want %v", v, tc.want)
			}
			acks := only(t, e.Poll(now, nil), SendAck)
			if tc.wantAck != (len(acks) == 1 && acks[0].Header.Flags&dgram.FlagAck != 0) {
				t.Errorf("immediate acks %+v, want %v", acks, tc.wantAck)
			}
			if tc.want == NotReady && tc.wantAck && (acks[0].Header.Flags&dgram.FlagNotReady == 0 || acks[0].Header.CumAck != 1) {
				t.Errorf("NOTREADY ack %+v", acks[0].Header)
			}
			if tc.want == Stale && tc.h.Type == dgram.RDData && (len(acks) != 1 || acks[0].Header.Flags != dgram.FlagReset) {
				t.Errorf("stale DATA: acks %+v, want one RESET", acks)
			}
		})
	}
}

func TestStaleDataAnswersReset(t *testing.T) {
	e := NewEndpoint(DefaultConfig(), incA)
	if v := e.Receive(t0, addrB, data(5, 0x1234), true); v != Stale {
		t.Fatalf("verdict %v", v)
	}
	acts := e.Poll(t0, nil)
	want := dgram.RDHeader{Version: 1, Type: dgram.RDAck, Flags: dgram.FlagReset, Incarnation: incA, EchoedIncarnation: incB, CumAck: 0x1234}
	if len(acts) != 1 || acts[0].Kind != SendAck || acts[0].Header != want {
		t.Fatalf("actions %+v, want RESET %+v", acts, want)
	}
	if e.Peers() != 0 {
		t.Errorf("stale DATA created peer state")
	}
}

func TestHoldThenDeliverHeldInOrder(t *testing.T) {
	e := NewEndpoint(DefaultConfig(), incA)
	for _, s := range []uint32{3, 2, 5} {
		if v := e.Receive(t0, addrB, data(s, 0), true); v != Hold {
			t.Fatalf("seq %d: %v", s, v)
		}
	}
	acts := e.Poll(t0, nil)
	if a := only(t, acts, SendAck); len(a) != 1 || a[0].Header.CumAck != 1 || a[0].Header.SACK != 0b1011 {
		t.Fatalf("SACK ack %+v", a)
	}
	if v := e.Receive(t0, addrB, data(1, 0), true); v != Deliver {
		t.Fatalf("seq 1: %v", v)
	}
	// 4 arrives before the engine polled: it must queue behind 2 and 3.
	if v := e.Receive(t0, addrB, data(4, 0), true); v != Hold {
		t.Fatalf("seq 4 while draining: %v", v)
	}
	var seqs []uint32
	for _, a := range only(t, e.Poll(t0, nil), DeliverHeld) {
		seqs = append(seqs, a.Header.Seq)
	}
	if len(seqs) != 4 || seqs[0] != 2 || seqs[1] != 3 || seqs[2] != 4 || seqs[3] != 5 {
		t.Fatalf("DeliverHeld seqs %v, want [2 3 4 5]", seqs)
	}
	if v := e.Receive(t0, addrB, data(6, 0), true); v != Deliver {
		t.Fatalf("seq 6 after drain: %v", v)
	}
}

func TestDelayedAck(t *testing.T) {
	cfg := DefaultConfig()
	e := NewEndpoint(cfg, incA)
	e.Receive(t0, addrB, data(1, 0), true)
	if a := e.Poll(t0, nil); len(a) != 0 {
		t.Fatalf("ack before AckDelay: %+v", a)
	}
	if d, _ := e.NextDeadline(); !d.Equal(t0.Add(cfg.AckDelay)) {
		t.Errorf("deadline %v, want %v", d, t0.Add(cfg.AckDelay))
	}
	a := e.Poll(t0.Add(cfg.AckDelay), nil)
	if len(a) != 1 || a[0].Kind != SendAck || a[0].Header.CumAck != 2 || a[0].Header.Window != uint16(4*cfg.Window+1) {
		t.Fatalf("delayed ack %+v", a)
	}
	// Two datagrams: ack at once; ACKREQ: ack at once.
	e.Receive(t0.Add(time.Millisecond), addrB, data(2, 0), true)
	e.Receive(t0.Add(time.Millisecond), addrB, data(3, 0), true)
	if a := e.Poll(t0.Add(time.Millisecond), nil); len(a) != 1 || a[0].Header.CumAck != 4 {
		t.Fatalf("every-second ack %+v", a)
	}
	h := data(4, 0)
	h.Flags = dgram.FlagAckReq
	e.Receive(t0.Add(2*time.Millisecond), addrB, h, true)
	if a := e.Poll(t0.Add(2*time.Millisecond), nil); len(a) != 1 || a[0].Header.CumAck != 5 {
		t.Fatalf("ACKREQ ack %+v", a)
	}
}

// RFC 6298 §2 arithmetic on the first and second samples; Karn: no sample
// from a retransmitted datagram.
func TestRTTEstimation(t *testing.T) {
	cfg := DefaultConfig()
	e := NewEndpoint(cfg, incA)
	e.Send(t0, addrB, 1)
	e.Receive(t0.Add(10*time.Millisecond), addrB, ack(2, 0, 256), true)
	p := e.peers[addrB]
	if p.srtt != int64(10*time.Millisecond) || p.rttvar != int64(5*time.Millisecond) {
		t.Fatalf("first sample: srtt %v rttvar %v", time.Duration(p.srtt), time.Duration(p.rttvar))
	}
	if got := e.rto(p); got != int64(30*time.Millisecond) {
		t.Errorf("rto %v, want 30ms", time.Duration(got))
	}
	now := t0.Add(20 * time.Millisecond)
	e.Send(now, addrB, 2)
	e.Receive(now.Add(2*time.Millisecond), addrB, ack(3, 0, 256), true)
	// RTTVAR = 3/4·5 + 1/4·|10−2| = 5.75ms; SRTT = 7/8·10 + 1/8·2 = 9ms.
	if p.srtt != int64(9*time.Millisecond) || p.rttvar != int64(5750*time.Microsecond) {
		t.Fatalf("second sample: srtt %v rttvar %v", time.Duration(p.srtt), time.Duration(p.rttvar))
	}
	// Karn: a retransmitted datagram gives no sample.
	now = t0.Add(100 * time.Millisecond)
	e.Send(now, addrB, 3)
	rto := time.Duration(e.rto(p))
	acts := e.Poll(now.Add(rto), nil)
	if r := only(t, acts, Retransmit); len(r) != 1 || r[0].Token != 3 || r[0].Header.Seq != 3 || r[0].Header.Flags&dgram.FlagAckReq == 0 {
		t.Fatalf("retransmit %+v", acts)
	}
	e.Receive(now.Add(rto+time.Millisecond), addrB, ack(4, 0, 256), true)
	if p.srtt != int64(9*time.Millisecond) {
		t.Errorf("sample taken from a retransmission: srtt %v", time.Duration(p.srtt))
	}
}

// Timeouts back off exponentially, capped at MaxRTO; after MaxRetries the
// token and those after it fail and a RESET goes to the peer.
func TestBackoffAndFailure(t *testing.T) {
	cfg := DefaultConfig()
	cfg.MaxRetries = 8
	cfg.MaxRTO = 500 * time.Millisecond
	e := NewEndpoint(cfg, incA)
	e.Receive(t0, addrB, data(1, 0), true) // learn incB
	e.Send(t0, addrB, 7)
	e.Send(t0, addrB, 8)
	now := t0
	wait := cfg.InitialRTO
	for i := 1; i <= cfg.MaxRetries; i++ {
		now = now.Add(wait)
		acts := only(t, e.Poll(now, nil), Retransmit)
		if len(acts) != 1 || acts[0].Token != 7 { // only the oldest has a timer (no go-back-N)
			t.Fatalf("retry %d at %v: %+v", i, now.Sub(t0), acts)
		}
		wait = min(2*wait, cfg.MaxRTO)
		if d, _ := e.NextDeadline(); !d.Equal(now.Add(wait)) {
			t.Fatalf("retry %d: next deadline %v, want %v", i, d.Sub(t0), now.Add(wait).Sub(t0))
		}
	}
	acts := e.Poll(now.Add(wait), nil)
	if got := kinds(acts); len(got) != 2 || got[0] != Failed || got[1] != Failed {
		t.Fatalf("failure actions %v", got)
	}
	if acts[0].Token != 7 || acts[1].Token != 8 {
		t.Errorf("failure actions %+v", acts)
	}
	// Our space starts over under a new incarnation of ours towards the
	// peer, so that no life of the peer can take the new space for the old
	// one; no RESET: the peer's space towards us is not disturbed.
	h, _ := e.Send(now.Add(wait), addrB, 9)
	if h.Seq != 1 || h.EchoedIncarnation != 0 || h.Incarnation == incA || h.Incarnation == 0 {
		t.Errorf("after failure: %+v, want a new space at 1, echo 0, a new incarnation", h)
	}
	// DATA from the peer echoing our previous incarnation is still for this
	// life: its space towards us goes on.
	if v := e.Receive(now.Add(wait), addrB, data(2, incA), true); v != Deliver {
		t.Errorf("DATA echoing the renewed incarnation: %v", v)
	}
	// DATA echoing an incarnation we never had is for another life.
	if v := e.Receive(now.Add(wait), addrB, data(3, incA+7), true); v != Stale {
		t.Errorf("DATA echoing a foreign incarnation: %v", v)
	}
}

func TestFastRetransmit(t *testing.T) {
	e := NewEndpoint(DefaultConfig(), incA)
	for i := 1; i <= 6; i++ {
		e.Send(t0, addrB, Token(i))
	}
	now := t0.Add(time.Millisecond)
	e.Receive(now, addrB, ack(2, 0b11, 256), true) // 1 acked; 3,4 sacked: 2 has only 2 later
	if r := only(t, e.Poll(now, nil), Retransmit); len(r) != 0 {
		t.Fatalf("early fast retransmit %+v", r)
	}
	e.Receive(now, addrB, ack(2, 0b111, 256), true) // 3,4,5 sacked, but 2 may just be reordered
	if r := only(t, e.Poll(now, nil), Retransmit); len(r) != 0 {
		t.Fatalf("fast retransmit within the reordering window (min RTT + min RTT/4 = 1.25ms) %+v", r)
	}
	now = t0.Add(4 * time.Millisecond)
	e.Receive(now, addrB, ack(2, 0b111, 256), true) // 2 outstanding 4ms: lost, resend 2
	acts := e.Poll(now, nil)
	if r := only(t, acts, Retransmit); len(r) != 1 || r[0].Token != 2 || r[0].Header.Seq != 2 {
		t.Fatalf("fast retransmit %+v", acts)
	}
	if a := only(t, acts, Acked); len(a) != 0 {
		t.Errorf("SACKed tokens completed before delivery: %+v", a)
	}
	e.Receive(now, addrB, ack(2, 0b1111, 256), true) // no second fast retransmit
	if r := only(t, e.Poll(now, nil), Retransmit); len(r) != 0 {
		t.Fatalf("repeated fast retransmit %+v", r)
	}
	e.Receive(now, addrB, ack(7, 0, 256), true)
	if a := only(t, e.Poll(now, nil), Acked); len(a) != 5 || a[0].Token != 2 || a[4].Token != 6 {
		t.Errorf("acked %+v", a)
	}
}

// NOTREADY: the datagram waits its own doubling back-off, not counted as a
// retry, and sending pauses meanwhile.
func TestNotReadyBackoff(t *testing.T) {
	cfg := DefaultConfig()
	cfg.MaxRetries = 2
	e := NewEndpoint(cfg, incA)
	e.Send(t0, addrB, 1)
	now := t0
	wait := cfg.NotReadyBackoff
	for i := 0; i < 12; i++ {
		nr := ack(1, 0, 256)
		nr.Flags |= dgram.FlagNotReady
		e.Receive(now, addrB, nr, true)
		if e.CanSend(addrB) {
			t.Fatal("CanSend while the receiver is not ready")
		}
		if d, _ := e.NextDeadline(); !d.Equal(now.Add(wait)) {
			t.Fatalf("round %d: deadline %v, want %v", i, d.Sub(now), wait)
		}
		now = now.Add(wait)
		acts := e.Poll(now, nil)
		if r := only(t, acts, Retransmit); len(r) != 1 {
			t.Fatalf("round %d: %v", i, kinds(acts))
		}
		wait = min(2*wait, cfg.MaxRTO)
	}
	if st := e.Stats(); st.Failed != 0 || st.NotReadyReceived != 12 {
		t.Errorf("stats %+v", st)
	}
	e.Receive(now, addrB, ack(2, 0, 256), true)
	if a := only(t, e.Poll(now, nil), Acked); len(a) != 1 {
		t.Errorf("acked %+v", a)
	}
	if e.peers[addrB].nrBackoff != 0 {
		t.Error("not-ready back-off not reset by progress")
	}
}

func TestResetAndRestart(t *testing.T) {
	e := NewEndpoint(DefaultConfig(), incA)
	e.Receive(t0, addrB, data(1, 0), true)
	e.Send(t0, addrB, 1)
	e.Send(t0, addrB, 2)
	e.Receive(t0, addrB, data(3, 0), true) // held
	e.Poll(t0, nil)
	// The peer restarted: new incarnation on DATA.
	h := data(1, 0)
	h.Incarnation = incB + 1
	if v := e.Receive(t0, addrB, h, true); v != Deliver {
		t.Fatalf("first DATA of the new life: %v", v)
	}
	// Only its old space towards us ends; ours towards it goes on (if the
	// new life has no state for it, it answers RESET).
	got := kinds(e.Poll(t0, nil))
	if len(got) != 1 || got[0] != DiscardHeld {
		t.Fatalf("restart actions %v", got)
	}
	// Late DATA of the old life: Stale, no RESET.
	if v := e.Receive(t0, addrB, data(2, incA), true); v != Stale {
		t.Fatalf("old-life DATA: %v", v)
	}
	if a := e.Poll(t0, nil); len(a) != 0 {
		t.Errorf("actions for old-life DATA %+v", a)
	}
	// A RESET answering DATA of ours to the old life does not reset again.
	r := dgram.RDHeader{Version: 1, Type: dgram.RDAck, Flags: dgram.FlagReset, Incarnation: incB + 1, EchoedIncarnation: incA, CumAck: incB}
	e.Send(t0, addrB, 5)
	if v := e.Receive(t0, addrB, r, true); v != Stale {
		t.Fatalf("late RESET: %v", v)
	}
	// A RESET for the current pair ends our space: 1, 2 and 5 are of
	// unknown fate.
	r.CumAck = 0
	e.Receive(t0, addrB, r, true)
	if got := kinds(e.Poll(t0, nil)); len(got) != 3 || got[0] != PeerReset || got[2] != PeerReset {
		t.Fatalf("RESET actions %v", got)
	}
	// The new space is under a new incarnation of ours.
	h1, _ := e.Send(t0, addrB, 6)
	if h1.Seq != 1 || h1.Incarnation == incA {
		t.Fatalf("after RESET: %+v", h1)
	}
	// A late duplicate of that RESET names the old incarnation: stale.
	if v := e.Receive(t0, addrB, r, true); v != Stale {
		t.Fatalf("duplicated RESET: %v", v)
	}
	// An ACK acknowledging numbers never sent: our space starts over.
	a := ack(50, 0, 256)
	a.Incarnation, a.EchoedIncarnation = incB+1, h1.Incarnation
	e.Receive(t0, addrB, a, true)
	acts := e.Poll(t0, nil)
	if got := kinds(acts); len(got) != 1 || got[0] != PeerReset || acts[0].Token != 6 {
		t.Fatalf("bad-ack actions %+v", acts)
	}
	if h2, _ := e.Send(t0, addrB, 7); h2.Seq != 1 || h2.Incarnation == h1.Incarnation || h2.Incarnation == incA {
		t.Errorf("after bad ack: %+v", h2)
	}
}

func TestMaxPeers(t *testing.T) {
	cfg := DefaultConfig()
	cfg.MaxPeers = 2
	e := NewEndpoint(cfg, incA)
	for i := range 3 {
		peer := netip.AddrPortFrom(netip.AddrFrom4([4]byte{10, 0, 0, byte(i)}), 1)
		_, err := e.Send(t0, peer, 1)
		if (i < 2) != (err == nil) {
			t.Errorf("peer %d: %v", i, err)
		}
		if i == 2 && !errors.Is(err, ErrTooManyPeers) {
			t.Errorf("err %v", err)
		}
	}
	third := netip.MustParseAddrPort("10.9.9.9:1")
	d := data(1, 0)
	d.CumAck = e.Cookie(third)
	if v := e.Receive(t0, third, d, true); v != Dropped {
		t.Errorf("verdict %v", v)
	}
}

// HoldAcks: the acknowledgement of a refused datagram (and of those after
// it) waits until the error message about it is acknowledged, so the peer
// learns of the error first; later datagrams are SACKed meanwhile.
func TestHoldAcks(t *testing.T) {
	e := NewEndpoint(DefaultConfig(), incA)
	for s := uint32(1); s <= 3; s++ {
		if v := e.Receive(t0, addrB, data(s, 0), true); v != Deliver {
			t.Fatalf("seq %d: %v", s, v)
		}
	}
	e.HoldAcks(addrB, 2, 99) // the engine refused seq 2; 99 is its error message
	h, _ := e.Send(t0, addrB, 99)
	if h.EchoedIncarnation != 0 {
		t.Fatalf("error message header %+v", h)
	}
	acts := e.Poll(t0, nil)
	a := only(t, acts, SendAck)
	if len(a) != 1 || a[0].Header.CumAck != 2 || a[0].Header.SACK != 0b1 {
		t.Fatalf("held ack %+v, want CumAck 2 SACK 0b1", acts)
	}
	// A duplicate of 2 is answered with the held-back ack again.
	e.Receive(t0, addrB, data(2, 0), true)
	if a := only(t, e.Poll(t0, nil), SendAck); len(a) != 1 || a[0].Header.CumAck != 2 {
		t.Fatalf("ack of the duplicate %+v", a)
	}
	// The peer acknowledges the error message: the held ack goes out.
	e.Receive(t0, addrB, ack(2, 0, 256), true)
	acts = e.Poll(t0, nil)
	if got := only(t, acts, Acked); len(got) != 1 || got[0].Token != 99 {
		t.Fatalf("error message not acked: %+v", acts)
	}
	if a := only(t, acts, SendAck); len(a) != 1 || a[0].Header.CumAck != 4 || a[0].Header.SACK != 0 {
		t.Fatalf("released ack %+v, want CumAck 4", acts)
	}
	// If the error message ends unacknowledged the hold is released too.
	e.Receive(t0, addrB, data(4, 0), true)
	e.HoldAcks(addrB, 4, 100)
	e.Send(t0, addrB, 100)
	e.Poll(t0, nil)
	rs := dgram.RDHeader{Version: 1, Type: dgram.RDAck, Flags: dgram.FlagReset, Incarnation: incB, EchoedIncarnation: incA}
	e.Receive(t0, addrB, rs, true)
	acts = e.Poll(t0, nil)
	if a := only(t, acts, SendAck); len(a) != 1 || a[0].Header.CumAck != 5 {
		t.Fatalf("after the error message was reset: %+v", acts)
	}
}
