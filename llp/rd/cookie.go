package rd

import (
	"encoding/binary"
	"math/bits"
	"net/netip"

	"github.com/iwarpd/iwarpd/llp/dgram"
)

// The incarnation handshake (docs/rd.md "New peers", wire-format.md §7.4).
// A source address earns per-peer state only by proving that it receives
// what is sent to it (return routability, as SYN cookies and QUIC's Retry
// tokens do): DATA from an address without a proven peer state — or with a
// Sender Incarnation other than the one recorded for it — is taken only
// when it carries, in Cumulative Ack (free on DATA without FlagAck), the
// cookie this endpoint computes for the address: SipHash-2-4 under a
// secret key of the address and port. Otherwise it is dropped unbuffered
// and answered by a Challenge (an ACK-type datagram, flag C, cookie in
// Cumulative Ack, 36 octets with key header and CRC: smaller than any DATA,
// so no reply amplifies), at most one per address per ReplyInterval
// (bursts of replyAddrBurst) and ReplyRate per second for the endpoint (a
// token bucket of ReplyBurst):
// RESETs to unproven addresses share those limits. No state is kept for an
// unproven address but one slot of a fixed table of reply times.

// replySlots is the size of the table of reply times per address hash.
const replySlots = 1024

// replyAddrBurst is the burst of replies one address may get at once.
const replyAddrBurst = 4

// siphash24 is SipHash-2-4 (Aumasson and Bernstein, 2012) of m under k.
func siphash24(k0, k1 uint64, m []byte) uint64 {
	v0 := k0 ^ 0x736f6d6570736575
	v1 := k1 ^ 0x646f72616e646f6d
	v2 := k0 ^ 0x6c7967656e657261
	v3 := k1 ^ 0x7465646279746573
	round := func() {
		v0 += v1
		v1 = bits.RotateLeft64(v1, 13)
		v1 ^= v0
		v0 = bits.RotateLeft64(v0, 32)
		v2 += v3
		v3 = bits.RotateLeft64(v3, 16)
		v3 ^= v2
		v0 += v3
		v3 = bits.RotateLeft64(v3, 21)
		v3 ^= v0
		v2 += v1
		v1 = bits.RotateLeft64(v1, 17)
		v1 ^= v2
		v2 = bits.RotateLeft64(v2, 32)
	}
	n := len(m)
	for len(m) >= 8 {
		w := binary.LittleEndian.Uint64(m)
		v3 ^= w
		round()
		round()
		v0 ^= w
		m = m[8:]
	}
	var last [8]byte
	copy(last[:], m)
	last[7] = byte(n)
	w := binary.LittleEndian.Uint64(last[:])
	v3 ^= w
	round()
	round()
	v0 ^= w
	v2 ^= 0xff
	round()
	round()
	round()
	round()
	return v0 ^ v1 ^ v2 ^ v3
}

// addrHash is SipHash-2-4 of addr (16-octet address, 2-octet port).
func (e *Endpoint) addrHash(addr netip.AddrPort) uint64 {
	var b [18]byte
	a := addr.Addr().As16()
	copy(b[:], a[:])
	binary.BigEndian.PutUint16(b[16:], addr.Port())
	return siphash24(e.key[0], e.key[1], b[:])
}

// Cookie returns the cookie of addr: what DATA from addr must carry in
// Cumulative Ack (without FlagAck) to be taken from an unproven address.
func (e *Endpoint) Cookie(addr netip.AddrPort) uint32 {
	c := uint32(e.addrHash(addr) >> 32)
	if c == 0 {
		c = 1
	}
	return c
}

// keyFrom expands a seed into a SipHash key (splitmix64), for
// configurations that give no CookieKey (tests: deterministic).
func keyFrom(seed uint64) [2]uint64 {
	next := func() uint64 {
		seed += 0x9e3779b97f4a7c15
		z := seed
		z = (z ^ z>>30) * 0xbf58476d1ce4e5b9
		z = (z ^ z>>27) * 0x94d049bb133111eb
		return z ^ z>>31
	}
	return [2]uint64{next(), next()}
}

// mayReply reports whether a reply (Challenge or RESET) to the unproven
// address addr may go out at t, and takes it from the limits if so.
func (e *Endpoint) mayReply(t int64, addr netip.AddrPort) bool {
	if e.replyAt == nil {
		e.replyAt = make([]int64, replySlots)
		e.tokens = float64(e.cfg.ReplyBurst)
		e.refillAt = t
	}
	e.tokens = min(float64(e.cfg.ReplyBurst), e.tokens+float64(t-e.refillAt)*float64(e.cfg.ReplyRate)/1e9)
	e.refillAt = t
	// Per address (hash slot): GCRA (ITU-T I.371), one reply per
	// ReplyInterval with bursts of replyAddrBurst; the slot holds the
	// theoretical arrival time.
	iv := int64(e.cfg.ReplyInterval)
	slot := &e.replyAt[e.addrHash(addr)%replySlots]
	tat := max(*slot, t)
	if tat-t > iv*(replyAddrBurst-1) || e.tokens < 1 {
		e.stats.RepliesLimited++
		return false
	}
	e.tokens--
	*slot = tat + iv
	return true
}

// challenge answers DATA h from the unproven address addr (no state is
// created): an ACK-type datagram with FlagChallenge and the cookie,
// echoing h's Sender Incarnation, when the limits allow.
func (e *Endpoint) challenge(t int64, addr netip.AddrPort, p *peer, h *dgram.RDHeader) {
	e.stats.Unproven++
	if len(e.pending) >= maxPending || h.Incarnation == 0 || !e.mayReply(t, addr) {
		return
	}
	e.stats.Challenges++
	e.push(Action{Kind: SendAck, Peer: addr, Header: dgram.RDHeader{
		Version: dgram.RDVersion, Type: dgram.RDAck, Flags: dgram.FlagChallenge | dgram.FlagExtSACK,
		Incarnation: e.ours(p), EchoedIncarnation: h.Incarnation, CumAck: e.Cookie(addr),
	}})
}

// proven reports whether DATA h from addr may be taken (its sender has
// proven it receives at addr): the peer state is proven and h comes from
// the incarnation recorded for it, or h carries addr's cookie.
func (e *Endpoint) proven(p *peer, addr netip.AddrPort, h *dgram.RDHeader) bool {
	if p != nil && p.proven && p.inc != 0 && h.Incarnation == p.inc {
		return true
	}
	return h.Flags&dgram.FlagAck == 0 && h.CumAck != 0 && h.CumAck == e.Cookie(addr)
}

// takeChallenge handles a Challenge from p (Echoed Incarnation checked):
// record the peer's incarnation and cookie and, when the cookie is new,
// resend at once what is outstanding to it (it was dropped unbuffered).
func (e *Endpoint) takeChallenge(p *peer, h *dgram.RDHeader) {
	e.stats.ChallengesReceived++
	if p.prev != 0 && h.Incarnation == p.prev {
		return // from the peer's previous life (reordered): stale
	}
	if p.inc == 0 {
		e.learn(p, h.Incarnation)
	}
	// A Challenge from another incarnation than the one recorded does not
	// change it: it may be a late one from an older life (reordered). If
	// the peer did restart, its new life answers our DATA, echoing the
	// old incarnation, with RESET, whose rules handle the change (§7.3);
	// its cookie is taken meanwhile.
	if h.CumAck == 0 || (h.CumAck == p.cookie && p.cookieDue) {
		return // already resending with it
	}
	p.cookie, p.cookieDue = h.CumAck, true
	resend := false
	for off := 0; off < p.out.n; off++ {
		if s := p.out.at(off); s.flags&segSacked == 0 && s.flags&segNotReady == 0 {
			s.flags |= segResend | segHandshake
			s.deadline = min(s.deadline, e.last)
			resend = true
		}
	}
	if resend {
		e.rearm(p)
	}
}
