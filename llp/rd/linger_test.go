package rd

import (
	"net/netip"
	"testing"
	"time"

	"github.com/iwarpd/iwarpd/llp/dgram"
)

// lingerPair makes a (incA at addrA) and b (incB at addrB) with a first
// message from a acknowledged, then a second message from a delivered at
// b whose ACK is lost, and a third lost on its way to b. It returns the
// time after that.
func lingerPair(t *testing.T, cfg Config) (a, b *Endpoint, now time.Time) {
	t.Helper()
	a, b = NewEndpoint(cfg, incA), NewEndpoint(cfg, incB)
	now = t0
	firstMessage(t, a, b, now)
	now = now.Add(time.Millisecond)
	h, _ := a.Send(now, addrB, 2)
	if v := b.Receive(now, addrA, h, true); v != Deliver {
		t.Fatalf("second DATA: %v", v)
	}
	a.Send(now, addrB, 3) // lost
	return a, b, now
}

// runAgainstLinger drives a's timers until its tokens 2 and 3 end, its
// datagrams to b answered by l (nil: nothing answers, a closed port); drop
// says whether the i-th reply of l is lost. It returns how each token
// ended.
func runAgainstLinger(t *testing.T, a *Endpoint, l *Linger, now time.Time, drop func(i int) bool) map[Token]ActionKind {
	t.Helper()
	ended := map[Token]ActionKind{}
	replies := 0
	for i := 0; i < 1000 && len(ended) < 2; i++ {
		for _, x := range a.Poll(now, nil) {
			switch x.Kind {
			case Acked, Failed, PeerReset:
				ended[x.Token] = x.Kind
			case Retransmit:
				if l == nil {
					continue
				}
				for _, r := range l.Receive(addrA, x.Header, nil) {
					if replies++; !drop(replies) {
						a.Receive(now, addrB, r.Header, true)
					}
				}
			}
		}
		d, ok := a.NextDeadline()
		if !ok {
			break
		}
		now = d
	}
	return ended
}

// A destroyed endpoint's linger acknowledges again the delivered message
// whose ACK was lost (it completes: Acked), even when its first replies
// are lost; the one it never got fails after MaxRetries as at a closed
// port. Without the linger both fail.
func TestLingerAcksDelivered(t *testing.T) {
	cfg := DefaultConfig()
	cfg.MaxRetries = 6
	for _, lossy := range []bool{false, true} {
		a, b, now := lingerPair(t, cfg)
		b.OwedAcks(now, nil) // lost
		l := b.Linger(now, 2*cfg.MaxRTO, 0)
		if l == nil || l.Peers() != 1 || !l.Has(addrA) {
			t.Fatalf("linger %+v: want one peer", l)
		}
		drop := func(i int) bool { return lossy && i <= 3 }
		ended := runAgainstLinger(t, a, l, now, drop)
		if ended[2] != Acked || ended[3] != Failed {
			t.Fatalf("lossy %v: tokens ended %v, want 2 Acked and 3 Failed", lossy, ended)
		}
		if st := l.Stats(); st.Acks == 0 {
			t.Fatalf("linger stats %+v", st)
		}
	}
	a, _, now := lingerPair(t, cfg)
	if ended := runAgainstLinger(t, a, nil, now, nil); ended[2] != Failed || ended[3] != Failed {
		t.Fatalf("closed port: tokens ended %v, want both Failed", ended)
	}
}

// DATA of another space (the sender's next one, after a failure), from
// another address, and anything but DATA get nothing.
func TestLingerIgnores(t *testing.T) {
	cfg := DefaultConfig()
	_, b, now := lingerPair(t, cfg)
	l := b.Linger(now, time.Second, 0)
	dup := dgram.RDHeader{Version: dgram.RDVersion, Type: dgram.RDData, Incarnation: incA, EchoedIncarnation: incB, Seq: 2}
	for i := range 3 {
		rs := l.Receive(addrA, dup, nil)
		if len(rs) != 1 || rs[0].Header.Flags&dgram.FlagAck == 0 || rs[0].Header.CumAck != 3 ||
			rs[0].Header.Incarnation != incB || rs[0].Header.EchoedIncarnation != incA {
			t.Fatalf("duplicate %d: %+v, want the ACK of 1..2", i, rs)
		}
	}
	newSpace := dup
	newSpace.Incarnation, newSpace.Seq = incA+1, 1
	other := netip.MustParseAddrPort("10.0.0.9:4791")
	ackH := dgram.RDHeader{Version: dgram.RDVersion, Type: dgram.RDAck, Flags: dgram.FlagAck, Incarnation: incA, EchoedIncarnation: incB, CumAck: 1}
	wrongEcho := dup
	wrongEcho.EchoedIncarnation = incB + 1
	for name, x := range map[string]struct {
		from netip.AddrPort
		h    dgram.RDHeader
	}{"new space": {addrA, newSpace}, "other address": {other, dup}, "ACK": {addrA, ackH}, "wrong echo": {addrA, wrongEcho}} {
		if rs := l.Receive(x.from, x.h, nil); len(rs) != 0 {
			t.Fatalf("%s answered: %+v", name, rs)
		}
	}
	if st := l.Stats(); st.Ignored != 4 || st.Acks != 3 {
		t.Fatalf("stats %+v, want 4 ignored, 3 ACKs", st)
	}
}

// Only peers heard from within recent are kept, at most maxPeers.
func TestLingerPeers(t *testing.T) {
	cfg := DefaultConfig()
	_, b, now := lingerPair(t, cfg)
	for i := range 10 {
		h := data(1, 0)
		h.CumAck = b.Cookie(netip.AddrPortFrom(netip.AddrFrom4([4]byte{10, 1, 0, byte(i)}), 9))
		b.Receive(now, netip.AddrPortFrom(netip.AddrFrom4([4]byte{10, 1, 0, byte(i)}), 9), h, true)
	}
	if l := b.Linger(now, time.Second, 4); l == nil || l.Peers() != 4 {
		t.Fatalf("maxPeers 4: %+v", l)
	}
	if l := b.Linger(now, time.Second, 0); l == nil || l.Peers() != 11 {
		t.Fatalf("no limit: %v", l)
	}
	if l := b.Linger(now.Add(2*time.Second), time.Second, 0); l != nil {
		t.Fatalf("peers silent for 2 s kept for a 1 s linger: %d peers", l.Peers())
	}
}
