package rd

import (
	"encoding/binary"
	"fmt"

	"github.com/iwarpd/iwarpd/llp/dgram"
	"github.com/iwarpd/iwarpd/llp/rd"
	"github.com/iwarpd/iwarpd/proto"
)

// The check of the RD halves a rank hands back (docs/design-small-messages.md
// "What the daemon distrusts on takeover", docs/fastpath.md "The RD
// halves"; the layout: proto/fastpath_rd.go). Everything in the page is
// the client's: the engine copies a slot once, then checks every field
// against what it exported there and what the protocol allows, and only
// then takes the numbers back into llp/rd. A field out of its bounds fails
// the QP alone (the caller moves it to ERROR). Nothing read here sizes an
// allocation beyond FPRDRing copies of at most FPRDCopyLen octets, or a
// loop beyond FPRDRing.

// fpExported is what the engine wrote into one slot at the hand-back.
type fpExported struct {
	st       rd.FPPeer
	qkey     uint32 // the peer's Q_Key as the QP knows it
	inFlight uint32 // most datagrams the rank may leave outstanding
	maxBody  int    // largest copy the datagram size allows
	at       int64  // CLOCK_MONOTONIC ns of the hand-back
}

// fpCopy is one datagram the rank left outstanding, copied out of the page.
type fpCopy struct {
	sentAt int64 // CLOCK_MONOTONIC ns, within [exported at, now]
	body   []byte
}

// fpImportSlot reads slot i of page (FastpathRDPageLen octets) back
// against x, at now (CLOCK_MONOTONIC ns): the peer's new state and the
// copies of its outstanding datagrams (oldest first), or why the rank's
// numbers cannot be (the QP fails).
func fpImportSlot(page []byte, i int, x *fpExported, now int64) (rd.FPPeer, []fpCopy, error) {
	if len(page) < proto.FastpathRDPageLen || i < 0 || i >= proto.FPRDSlots {
		return rd.FPPeer{}, nil, fmt.Errorf("slot %d of a page of %d octets", i, len(page))
	}
	var s [proto.FPRDSlotLen]byte
	copy(s[:], page[proto.FPRDSlotOff(i):])
	u32 := func(off int) uint32 { return binary.LittleEndian.Uint32(s[off:]) }
	st := x.st
	st.NextSeq, st.SndUna, st.AckCum, st.Limit = u32(proto.OffFPRDNextSeq), u32(proto.OffFPRDSndUna), u32(proto.OffFPRDAckCum), u32(proto.OffFPRDLimit)
	head, n := u32(proto.OffFPRDOutHead), u32(proto.OffFPRDOutN)
	rcvNext, unacked, ackDue := u32(proto.OffFPRDRcvNext), u32(proto.OffFPRDUnacked), u32(proto.OffFPRDAckDue)
	bad := func(format string, a ...any) (rd.FPPeer, []fpCopy, error) {
		return rd.FPPeer{}, nil, fmt.Errorf("peer slot %d (%v): "+format, append([]any{i, x.st.Addr}, a...)...)
	}
	// The send half: nothing behind what was exported, SndUna ≤ AckCum ≤
	// NextSeq, exactly OutN outstanding, within the rank's allowance and
	// the peer's window.
	switch {
	case !x.st.MaySend && st.NextSeq != x.st.NextSeq:
		return bad("NextSeq %d moved from %d although the rank could not send to the peer", st.NextSeq, x.st.NextSeq)
	case !dgram.SeqLessEq(x.st.SndUna, st.SndUna):
		return bad("SndUna %d is behind the %d exported", st.SndUna, x.st.SndUna)
	case !dgram.SeqLessEq(x.st.NextSeq, st.NextSeq):
		return bad("NextSeq %d is behind the %d exported", st.NextSeq, x.st.NextSeq)
	case !dgram.SeqLessEq(st.SndUna, st.AckCum) || !dgram.SeqLessEq(st.AckCum, st.NextSeq):
		return bad("AckCum %d is not within SndUna %d .. NextSeq %d", st.AckCum, st.SndUna, st.NextSeq)
	case n > x.inFlight || st.NextSeq-st.SndUna != n:
		return bad("OutN %d: want NextSeq − SndUna = %d, at most %d", n, st.NextSeq-st.SndUna, x.inFlight)
	case n > 0 && head >= proto.FPRDRing:
		return bad("OutHead %d beyond the ring of %d", head, proto.FPRDRing)
	case !dgram.SeqLessEq(st.AckCum, st.Limit) || st.Limit-st.AckCum > 0xffff:
		return bad("Limit %d is not AckCum %d plus a 16-bit window", st.Limit, st.AckCum)
	}
	// The receive half: RcvNext not behind the export (unchanged without a
	// receive space), counts within their fields.
	switch {
	case !x.st.MayRecv && rcvNext != x.st.RcvNext:
		return bad("RcvNext %d moved from %d without a receive space", rcvNext, x.st.RcvNext)
	case x.st.MayRecv && !dgram.SeqLessEq(x.st.RcvNext, rcvNext):
		return bad("RcvNext %d is behind the %d exported", rcvNext, x.st.RcvNext)
	case unacked > 0xffff:
		return bad("Unacked %d beyond 65535", unacked)
	case ackDue > 1:
		return bad("AckDue %d is neither 0 nor 1", ackDue)
	}
	st.RcvNext, st.Unacked, st.AckDue = rcvNext, uint16(unacked), ackDue == 1
	// The ring: OutN entries from OutHead, in sequence from SndUna, each
	// copy's length within bounds, send times clamped into the ownership.
	var outs []fpCopy
	if n > 0 {
		outs = make([]fpCopy, n)
	}
	for k := range n {
		j := int((head + k) % proto.FPRDRing)
		e := s[proto.OffFPRDRing+j*proto.FPRDEntryLen:]
		seq, l := binary.LittleEndian.Uint32(e[proto.OffFPRDEntrySeq:]), binary.LittleEndian.Uint32(e[proto.OffFPRDEntryLen:])
		at := int64(binary.LittleEndian.Uint64(e[proto.OffFPRDEntrySentAt:]))
		switch {
		case seq != st.SndUna+k:
			return bad("ring entry %d has sequence number %d, want %d", j, seq, st.SndUna+k)
		case l < proto.FPRDMinBody || int(l) > x.maxBody:
			return bad("ring entry %d (sequence number %d) has a copy of %d octets: want %d..%d", j, seq, l, proto.FPRDMinBody, x.maxBody)
		}
		off := proto.FPRDCopyOff(i, j)
		outs[k] = fpCopy{sentAt: min(max(at, x.at), now), body: append([]byte(nil), page[off:off+int(l)]...)}
	}
	return st, outs, nil
}

// fpExportSlot writes x into slot i of page: the read-only part and the
// halves' starting values; an empty ring.
func fpExportSlot(page []byte, i int, x *fpExported) {
	s := page[proto.FPRDSlotOff(i) : proto.FPRDSlotOff(i)+proto.FPRDSlotLen]
	clear(s)
	st := &x.st
	flags := proto.FPRDValid
	if st.MaySend {
		flags |= proto.FPRDSend
	}
	if st.MayRecv {
		flags |= proto.FPRDRecv
	}
	le := binary.LittleEndian
	le.PutUint32(s[proto.OffFPRDState:], flags)
	le.PutUint16(s[proto.OffFPRDPort:], st.Addr.Port())
	a := st.Addr.Addr().As16()
	copy(s[proto.OffFPRDAddr:], a[:])
	le.PutUint32(s[proto.OffFPRDQKey:], x.qkey)
	le.PutUint16(s[proto.OffFPRDAdvWnd:], st.AdvWnd)
	le.PutUint32(s[proto.OffFPRDOurInc:], st.OurInc)
	le.PutUint32(s[proto.OffFPRDPeerInc:], st.PeerInc)
	le.PutUint32(s[proto.OffFPRDCookie:], st.Cookie)
	le.PutUint32(s[proto.OffFPRDInFlight:], x.inFlight)
	le.PutUint64(s[proto.OffFPRDRTO:], uint64(st.RTO))
	le.PutUint32(s[proto.OffFPRDNextSeq:], st.NextSeq)
	le.PutUint32(s[proto.OffFPRDSndUna:], st.SndUna)
	le.PutUint32(s[proto.OffFPRDAckCum:], st.AckCum)
	le.PutUint32(s[proto.OffFPRDLimit:], st.Limit)
	le.PutUint32(s[proto.OffFPRDRcvNext:], st.RcvNext)
	le.PutUint32(s[proto.OffFPRDUnacked:], uint32(st.Unacked))
	if st.AckDue {
		le.PutUint32(s[proto.OffFPRDAckDue:], 1)
	}
}
