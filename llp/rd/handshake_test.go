package rd

import (
	"encoding/binary"
	"net/netip"
	"testing"
	"time"

	"github.com/iwarpd/iwarpd/llp/dgram"
)

// The SipHash-2-4 reference vector (Aumasson and Bernstein, appendix A):
// key 00 01 … 0f, message 00 01 … 0e.
func TestSipHashVector(t *testing.T) {
	var k [16]byte
	m := make([]byte, 15)
	for i := range k {
		k[i] = byte(i)
	}
	for i := range m {
		m[i] = byte(i)
	}
	got := siphash24(binary.LittleEndian.Uint64(k[:8]), binary.LittleEndian.Uint64(k[8:]), m)
	if got != 0xa129ca6149be45e5 {
		t.Fatalf("siphash24 = %#x, want 0xa129ca6149be45e5", got)
	}
}

// floodAddr is the i-th address of a flood (a port each, like spoofed
// sources).
func floodAddr(i int) netip.AddrPort {
	return netip.AddrPortFrom(netip.AddrFrom4([4]byte{192, 0, 2, byte(i >> 16)}), uint16(i))
}

// Out-of-order DATA from addresses that never proved themselves creates
// no peer state and holds nothing, whatever its sequence numbers: each is
// Unproven, and the Challenges answering them are limited.
func TestUnprovenDataKeepsNothing(t *testing.T) {
	e := NewEndpoint(DefaultConfig(), incA)
	now := t0
	const n = 20000
	var out []Action
	for i := range n {
		h := dgram.RDHeader{Version: 1, Type: dgram.RDData, Incarnation: 7, Seq: uint32(2 + i%100), CumAck: uint32(i)}
		if v := e.Receive(now, floodAddr(i), h, true); v != Unproven {
			t.Fatalf("datagram %d: %v, want Unproven", i, v)
		}
		if i%1000 == 999 {
			out = e.Poll(now, out[:0])
			now = now.Add(time.Millisecond) // 1 M datagrams/s
		}
	}
	e.Poll(now, out[:0])
	st := e.Stats()
	if e.Peers() != 0 || st.Held != 0 || st.PeersCreated != 0 {
		t.Fatalf("peers %d, held %d, created %d: want none", e.Peers(), st.Held, st.PeersCreated)
	}
	// 20 ms of flood: at most the burst plus 20 ms of the rate.
	limit := uint64(e.cfg.ReplyBurst) + uint64(e.cfg.ReplyRate)*20/1000 + 1
	if st.Challenges > limit || st.Challenges+st.RepliesLimited != n {
		t.Fatalf("challenges %d (limited %d) for %d datagrams, want ≤ %d", st.Challenges, st.RepliesLimited, n, limit)
	}
	t.Logf("%d datagrams: %d challenges, %d limited", n, st.Challenges, st.RepliesLimited)
}

// A Challenge is 24 octets of RD header — smaller than any DATA datagram
// it answers (RD header and at least a DDP header) — carries the cookie
// of the address it goes to, and echoes the incarnation of the DATA.
func TestChallengeFormat(t *testing.T) {
	e := NewEndpoint(DefaultConfig(), incA)
	h := dgram.RDHeader{Version: 1, Type: dgram.RDData, Incarnation: incB, Seq: 1}
	if v := e.Receive(t0, addrB, h, true); v != Unproven {
		t.Fatalf("verdict %v", v)
	}
	acks := only(t, e.Poll(t0, nil), SendAck)
	if len(acks) != 1 {
		t.Fatalf("actions %v, want one Challenge", acks)
	}
	c := acks[0].Header
	want := dgram.RDHeader{Version: 1, Type: dgram.RDAck, Flags: dgram.FlagChallenge | dgram.FlagExtSACK,
		Incarnation: incA, EchoedIncarnation: incB, CumAck: e.Cookie(addrB)}
	if c != want || acks[0].Peer != addrB {
		t.Fatalf("challenge %+v to %v, want %+v", c, acks[0].Peer, want)
	}
	if n := len(c.Append(nil)); n != dgram.RDHeaderLen {
		t.Fatalf("challenge %d octets, want %d", n, dgram.RDHeaderLen)
	}
	// The cookie of another address, or a wrong one, proves nothing.
	for _, ck := range []uint32{e.Cookie(addrA), e.Cookie(addrB) ^ 1} {
		h.CumAck = ck
		if v := e.Receive(t0, addrB, h, true); v != Unproven {
			t.Fatalf("cookie %#x: %v, want Unproven", ck, v)
		}
	}
	// A piggybacked ack hides the cookie field: not a proof either.
	h.CumAck, h.Flags = e.Cookie(addrB), dgram.FlagAck
	if v := e.Receive(t0, addrB, h, true); v != Unproven {
		t.Fatalf("cookie with FlagAck: %v, want Unproven", v)
	}
	h.Flags = 0
	if v := e.Receive(t0, addrB, h, true); v != Deliver || e.Peers() != 1 {
		t.Fatalf("with the cookie: %v, peers %d", v, e.Peers())
	}
	// Its later DATA needs no cookie; another incarnation from the address
	// (a restart, or a forger) needs one again.
	if v := e.Receive(t0, addrB, dgram.RDHeader{Version: 1, Type: dgram.RDData, Incarnation: incB, Seq: 2}, true); v != Deliver {
		t.Fatalf("proven peer's next DATA: %v", v)
	}
	if v := e.Receive(t0, addrB, dgram.RDHeader{Version: 1, Type: dgram.RDData, Incarnation: incB + 1, Seq: 1}, true); v != Unproven {
		t.Fatalf("another incarnation without cookie: %v, want Unproven", v)
	}
}

// Cookies depend on the key: another life (another random key) gives
// other cookies.
func TestCookieKey(t *testing.T) {
	var k1, k2 [16]byte
	k1[0], k2[0] = 1, 2
	e1 := NewEndpoint(Config{CookieKey: k1}, incA)
	e2 := NewEndpoint(Config{CookieKey: k2}, incA)
	same := 0
	for i := range 1000 {
		if e1.Cookie(floodAddr(i)) == e2.Cookie(floodAddr(i)) {
			same++
		}
	}
	if same > 1 {
		t.Fatalf("%d of 1000 cookies equal under two keys", same)
	}
}

// Replies to one address: at most a burst of replyAddrBurst, then one per
// ReplyInterval, however fast it sends.
func TestReplyLimitPerAddress(t *testing.T) {
	e := NewEndpoint(DefaultConfig(), incA)
	now := t0
	const dur = 100 * time.Millisecond
	for i := range 10000 { // one every 10 µs
		h := dgram.RDHeader{Version: 1, Type: dgram.RDData, Incarnation: 9, Seq: uint32(i + 1)}
		e.Receive(now, addrB, h, true)
		now = now.Add(dur / 10000)
	}
	want := uint64(replyAddrBurst) + uint64(dur/e.cfg.ReplyInterval)
	if got := e.Stats().Challenges; got > want || got < want-1 {
		t.Fatalf("%d challenges to one address in %v, want %d", got, dur, want)
	}
}

// Stale DATA (echoing an incarnation that is not ours) from unproven
// addresses draws RESETs within the same limits: no reflection.
func TestStaleDataResetsLimited(t *testing.T) {
	e := NewEndpoint(DefaultConfig(), incA)
	for i := range 5000 {
		h := dgram.RDHeader{Version: 1, Type: dgram.RDData, Incarnation: 9, EchoedIncarnation: 0x5555, Seq: 3}
		if v := e.Receive(t0, floodAddr(i), h, true); v != Stale {
			t.Fatalf("%v, want Stale", v)
		}
	}
	if st := e.Stats(); st.ResetsSent > uint64(e.cfg.ReplyBurst) || e.Peers() != 0 {
		t.Fatalf("%d RESETs for 5000 stale datagrams at once, want ≤ %d; peers %d", st.ResetsSent, e.cfg.ReplyBurst, e.Peers())
	}
}

// The handshake between two endpoints: the first DATA is dropped and
// challenged, the sender resends it at once with the cookie (no timeout,
// not counted as a retransmission), then it is delivered; replies go the
// other way without a Challenge (the acknowledgement proved the sender).
func TestHandshakeBetweenEndpoints(t *testing.T) {
	a := NewEndpoint(DefaultConfig(), incA)
	b := NewEndpoint(DefaultConfig(), incB)
	now := t0
	h, err := a.Send(now, addrB, 1)
	if err != nil {
		t.Fatal(err)
	}
	if v := b.Receive(now, addrA, h, true); v != Unproven {
		t.Fatalf("first DATA: %v", v)
	}
	ch := only(t, b.Poll(now, nil), SendAck)
	if len(ch) != 1 || ch[0].Header.Flags&dgram.FlagChallenge == 0 {
		t.Fatalf("b's actions %v", ch)
	}
	now = now.Add(100 * time.Microsecond)
	if v := a.Receive(now, addrB, ch[0].Header, true); v != AckOnly {
		t.Fatalf("challenge at a: %v", v)
	}
	rt := only(t, a.Poll(now, nil), Retransmit)
	if len(rt) != 1 || rt[0].Token != 1 || rt[0].Header.CumAck != b.Cookie(addrA) || rt[0].Header.Flags&dgram.FlagAck != 0 {
		t.Fatalf("a's resend %+v, want token 1 with the cookie %#x", rt, b.Cookie(addrA))
	}
	if st := a.Stats(); st.Retransmits != 0 || st.HandshakeResends != 1 || st.Timeouts != 0 {
		t.Fatalf("a stats %+v", st)
	}
	if v := b.Receive(now, addrA, rt[0].Header, true); v != Deliver {
		t.Fatalf("DATA with the cookie: %v", v)
	}
	now = now.Add(time.Millisecond)
	acks := only(t, b.Poll(now, nil), SendAck)
	if len(acks) != 1 || acks[0].Header.Flags&dgram.FlagAck == 0 {
		t.Fatalf("b's ack %+v", acks)
	}
	a.Receive(now, addrB, acks[0].Header, true)
	if got := only(t, a.Poll(now, nil), Acked); len(got) != 1 {
		t.Fatalf("a acked %v", got)
	}
	// b answers: a takes it at once (b acknowledged a's DATA: proven).
	hb, err := b.Send(now, addrA, 2)
	if err != nil {
		t.Fatal(err)
	}
	if v := a.Receive(now, addrB, hb, true); v != Deliver {
		t.Fatalf("reply DATA: %v, want Deliver", v)
	}
	if a.Stats().Challenges != 0 {
		t.Fatalf("a challenged b")
	}
}

// A peer that dropped its state for us (it restarted... or reclaimed an
// idle one) challenges our piggybacked DATA: we resend with the cookie and
// no piggybacked ack until it acknowledges again.
func TestChallengeOfKnownPeer(t *testing.T) {
	a := NewEndpoint(DefaultConfig(), incA)
	b := NewEndpoint(DefaultConfig(), incB)
	now := t0
	// Prove both ways: a→b (challenge round), b→a.
	h, _ := a.Send(now, addrB, 1)
	b.Receive(now, addrA, h, true)
	ch := only(t, b.Poll(now, nil), SendAck)[0].Header
	a.Receive(now, addrB, ch, true)
	h = only(t, a.Poll(now, nil), Retransmit)[0].Header
	b.Receive(now, addrA, h, true)
	for _, x := range only(t, b.Poll(now.Add(time.Millisecond), nil), SendAck) {
		a.Receive(now, addrB, x.Header, true)
	}
	a.Poll(now, nil)
	// b forgets a (a fresh endpoint with the same incarnation and key
	// stands in for the reclaimed state); a's next DATA is challenged.
	b = NewEndpoint(DefaultConfig(), incB)
	now = now.Add(time.Millisecond)
	h, _ = a.Send(now, addrB, 2)
	if v := b.Receive(now, addrA, h, true); v != Unproven && v != Stale {
		t.Fatalf("DATA to a forgetful peer: %v", v)
	}
	for _, x := range only(t, b.Poll(now, nil), SendAck) {
		a.Receive(now, addrB, x.Header, true)
	}
	rt := only(t, a.Poll(now, nil), Retransmit)
	if len(rt) != 1 || rt[0].Header.Flags&dgram.FlagAck != 0 || rt[0].Header.CumAck != b.Cookie(addrA) {
		t.Fatalf("resend %+v, want the cookie and no piggybacked ack", rt)
	}
}
