package mpa

import (
	"fmt"

	"github.com/iwarpd/iwarpd/iwerr"
)

// This file is the MPA Request/Reply exchange (RFC 5044 §7.1, RFC 6581
// §6–9) as a pure state machine: it takes parsed frames and returns frames to
// send, negotiated parameters, or a *NegotiationError naming the RFC action.
// It owns no socket and no timer (the caller arms the MPA Reply timeout).
//
// Decisions, with their sources:
//
//   - CRC (RFC 5044 §7.1, "C"): CRC is used when either frame has C=1; a side
//     that did not ask for CRC MUST still use it when the peer asks (siw
//     quotes "RFC 5044, page 27: CRC MUST be used if peer requests it";
//     Wireshark computes req.C | rep.C). So CRCOff only means "do not ask".
//     CRCRefuse is siw's non-conforming mpa_crc_strict: refuse a peer that
//     asks. CRCRequired differs from CRCPreferred only at the initiator: a
//     Reply without C is then treated as an invalid Reply.
//   - Markers are per direction: M in the Request asks the responder to put
//     markers into what it sends; M in the Reply asks the same of the
//     initiator. Params.MarkersRx is our own M, Params.MarkersTx the peer's.
//   - Revision: a Request with Rev > 2 is invalid (rejected, 0x04). Rev 0
//     (pre-RFC draft framing) is rejected unless Policy.AcceptRev0 (siw
//     accepts 0 and treats it as 1). The Reply carries min(request Rev,
//     our Rev). A Rev 2 initiator accepts a Rev 1 Reply (or a Rev 2 Reply
//     without S) as an RFC 5044 fallback unless it asked for peer-to-peer
//     mode or Policy.RequireEnhanced is set.
//   - IRD/ORD (RFC 6581 §7, siw): the responder answers with
//     IRD = min(own IRD, initiator ORD) and ORD = min(own ORD, initiator IRD),
//     so it never errs itself; the initiator checks the Reply: responder ORD
//     greater than our IRD, or our ORD greater than the responder IRD, is
//     TERMINATE 0x06 (Insufficient IRD). With Policy.LowerORD the initiator
//     instead lowers its own ORD to the responder's IRD (siw's
//     relaxed_ird_negotiation).
//   - Peer-to-peer (RFC 6581 §9): the responder echoes A and chooses exactly
//     one RTR type among those offered that its policy accepts, preferring
//     Write, then Read, then Send (siw). With no common type it rejects with
//     0x07. The initiator checks that the Reply echoes A and names exactly one
//     of the offered types, else TERMINATE 0x04 / 0x07.

// CRCPolicy says whether a side asks for MPA CRC.
type CRCPolicy uint8

const (
	// CRCPreferred asks for CRC (C=1) and accepts a Reply without C (CRC is
	// then still used, since our Request had C). The default.
	CRCPreferred CRCPolicy = iota
	// CRCRequired asks for CRC; an initiator treats a Reply with C=0 as an
	// invalid Reply (0x04).
	CRCRequired
	// CRCOff does not ask for CRC but uses it when the peer asks, as
	// RFC 5044 §7.1 requires.
	CRCOff
	// CRCRefuse does not ask for CRC and refuses a peer that asks (siw's
	// mpa_crc_strict). Not RFC conforming; for interop tests only.
	CRCRefuse
)

func (p CRCPolicy) asks() bool { return p == CRCPreferred || p == CRCRequired }

// RTRType is a zero-length ready-to-receive message of peer-to-peer mode
// (RFC 6581 §9).
type RTRType uint8

const (
	RTRNone  RTRType = iota // not peer-to-peer mode
	RTRSend                 // zero-length Send (B)
	RTRWrite                // zero-length RDMA Write (C)
	RTRRead                 // zero-length RDMA Read (D)
)

func (t RTRType) String() string {
	switch t {
	case RTRNone:
		return "none"
	case RTRSend:
		return "send"
	case RTRWrite:
		return "write"
	case RTRRead:
		return "read"
	}
	return fmt.Sprintf("rtr(%d)", uint8(t))
}

// RTRSet is a set of RTR types (offered or acceptable).
type RTRSet uint8

const (
	RTRSetSend RTRSet = 1 << iota
	RTRSetWrite
	RTRSetRead
)

// defaultRTR is offered/accepted when a policy names none: what siw supports
// (a Send RTR would need a pre-posted Receive).
const defaultRTR = RTRSetWrite | RTRSetRead

// Has reports whether t is in s.
func (s RTRSet) Has(t RTRType) bool {
	switch t {
	case RTRSend:
		return s&RTRSetSend != 0
	case RTRWrite:
		return s&RTRSetWrite != 0
	case RTRRead:
		return s&RTRSetRead != 0
	}
	return false
}

// single returns the one type in s, or RTRNone and false if s holds zero or
// several types.
func (s RTRSet) single() (RTRType, bool) {
	switch s {
	case RTRSetSend:
		return RTRSend, true
	case RTRSetWrite:
		return RTRWrite, true
	case RTRSetRead:
		return RTRRead, true
	}
	return RTRNone, false
}

func (t RTRType) set() RTRSet {
	switch t {
	case RTRSend:
		return RTRSetSend
	case RTRWrite:
		return RTRSetWrite
	case RTRRead:
		return RTRSetRead
	}
	return 0
}

// Policy is one side's wishes and limits for the exchange. The zero value is
// Rev 2, CRC preferred, no markers, IRD = ORD = 0, client/server model.
type Policy struct {
	// Revision is 1 (RFC 5044) or 2 (RFC 6581, with the S bit and the
	// IRD/ORD block). 0 means 2.
	Revision uint8
	CRC      CRCPolicy
	// Markers asks the peer to insert markers into the FPDUs we receive.
	Markers bool
	// IRD and ORD are our inbound and outbound RDMA Read depths (14 bits;
	// larger values are clamped to MaxIRDORD).
	IRD, ORD uint16
	// PeerToPeer (initiator) asks for RFC 6581 peer-to-peer mode, offering
	// RTRTypes.
	PeerToPeer bool
	// RTRTypes is the set of RTR types offered (initiator) or acceptable
	// (responder). Empty means Write and Read.
	RTRTypes RTRSet
	// PrivateData is the ULP's private data (after the IRD/ORD block on
	// Rev 2); at most MaxPrivateData, less EnhancedLen on Rev 2.
	PrivateData []byte
	// AcceptRev0 accepts a Rev 0 frame as Rev 1, as siw does.
	AcceptRev0 bool
	// RequireEnhanced refuses a peer that does not speak Rev 2 with S:
	// responder rejects such a Request, initiator fails such a Reply.
	RequireEnhanced bool
	// LowerORD (initiator) accepts a Reply whose IRD is below our ORD and
	// lowers our ORD to it, instead of TERMINATE 0x06.
	LowerORD bool
}

// Validate reports a policy the frames cannot express.
func (p Policy) Validate() error {
	if p.Revision > 2 {
		return fmt.Errorf("mpa: policy: revision %d not supported", p.Revision)
	}
	if p.CRC > CRCRefuse {
		return fmt.Errorf("mpa: policy: unknown CRC policy %d", p.CRC)
	}
	if p.PeerToPeer && p.revision() != 2 {
		return fmt.Errorf("mpa: policy: peer-to-peer mode needs revision 2")
	}
	if p.IRD > MaxIRDORD || p.ORD > MaxIRDORD {
		return fmt.Errorf("mpa: policy: IRD %d / ORD %d exceed %d", p.IRD, p.ORD, MaxIRDORD)
	}
	if n := p.maxULPPrivateData(); len(p.PrivateData) > n {
		return fmt.Errorf("mpa: policy: %d octets of private data, at most %d fit", len(p.PrivateData), n)
	}
	return nil
}

func (p Policy) revision() uint8 {
	if p.Revision == 0 {
		return 2
	}
	return p.Revision
}

func (p Policy) maxULPPrivateData() int {
	if p.revision() == 2 {
		return MaxPrivateData - EnhancedLen
	}
	return MaxPrivateData
}

// ulpPrivateData returns PrivateData cut to what fits (Validate reports the
// cut).
func (p Policy) ulpPrivateData() []byte {
	return p.PrivateData[:min(len(p.PrivateData), p.maxULPPrivateData())]
}

func (p Policy) rtrTypes() RTRSet {
	if s := p.RTRTypes & (RTRSetSend | RTRSetWrite | RTRSetRead); s != 0 {
		return s
	}
	return defaultRTR
}

func clampIRDORD(v uint16) uint16 { return min(v, MaxIRDORD) }

// Params is the outcome of a successful exchange, from this side's view.
type Params struct {
	Revision uint8 // the revision of the Reply
	Enhanced bool  // the IRD/ORD block was exchanged (Rev 2 with S)
	CRC      bool  // CRC32c is generated and checked in both directions
	// MarkersTx: we insert markers into what we send (the peer asked).
	MarkersTx bool
	// MarkersRx: the peer inserts markers into what we receive (we asked).
	MarkersRx bool
	// LocalIRD/LocalORD are the depths this side must honour; PeerIRD and
	// PeerORD what the peer advertised. All zero-valued peer fields when
	// !Enhanced (RFC 5044 has no exchange; the ULP must agree otherwise).
	LocalIRD, LocalORD uint16
	PeerIRD, PeerORD   uint16
	PeerToPeer         bool
	// RTR is the negotiated RTR message: the initiator sends it, the
	// responder waits for it before sending anything.
	RTR RTRType
	// PeerPrivateData is the peer's ULP private data (IRD/ORD block removed),
	// aliasing the peer's frame.
	PeerPrivateData []byte
}

// Initiator is the active side: it sends the Request first, then handles the
// Reply.
type Initiator struct {
	p       Policy
	req     Frame
	sent    bool
	handled bool
}

// NewInitiator returns an initiator with policy p (see Policy.Validate).
func NewInitiator(p Policy) *Initiator { return &Initiator{p: p} }

// Request returns the MPA Request frame to send. It is the same frame on
// every call.
func (in *Initiator) Request() Frame {
	if in.sent {
		return in.req
	}
	p := in.p
	f := Frame{Markers: p.Markers, CRC: p.CRC.asks(), Revision: p.revision()}
	var pd []byte
	if f.Revision == 2 {
		f.Enhanced = true
		e := Enhanced{IRD: clampIRDORD(p.IRD), ORD: clampIRDORD(p.ORD), PeerToPeer: p.PeerToPeer}
		if p.PeerToPeer {
			e.setRTR(p.rtrTypes())
		}
		pd = e.Append(make([]byte, 0, EnhancedLen+len(p.ulpPrivateData())))
	}
	pd = append(pd, p.ulpPrivateData()...)
	if len(pd) > 0 {
		f.PrivateData = pd
	}
	in.req, in.sent = f, true
	return f
}

// HandleReply checks the responder's Reply against our Request. Errors: a
// *RejectedError (errors.Is ErrRejected) when R=1, with the peer's private
// data also in Params.PeerPrivateData; a *NegotiationError whose Term the
// caller sends in a TERMINATE before closing; ErrState if called before
// Request or twice.
func (in *Initiator) HandleReply(f Frame) (Params, error) {
	if !in.sent || in.handled {
		return Params{}, fmt.Errorf("mpa: initiator: HandleReply: %w", ErrState)
	}
	in.handled = true
	p, req := in.p, in.req
	fail := func(term iwerr.Error, format string, args ...any) (Params, error) {
		return Params{}, negotiationErr(term, false, format, args...)
	}
	if !f.Reply {
		return fail(iwerr.MPAInvalidReqReply, "reply has the request key")
	}
	if len(f.PrivateData) > MaxPrivateData {
		return fail(iwerr.MPAInvalidReqReply, "reply has %d octets of private data", len(f.PrivateData))
	}
	if f.Reject {
		pd := f.PrivateData
		if f.Enhanced && f.Revision == 2 && len(pd) >= EnhancedLen {
			pd = pd[EnhancedLen:]
		}
		if len(pd) == 0 {
			pd = nil
		}
		return Params{PeerPrivateData: pd}, &RejectedError{PrivateData: pd}
	}
	rev := f.Revision
	switch {
	case rev > req.Revision:
		return fail(iwerr.MPAInvalidReqReply, "reply revision %d above request revision %d", rev, req.Revision)
	case rev == 0 && !p.AcceptRev0:
		return fail(iwerr.MPAInvalidReqReply, "reply revision 0")
	}
	switch {
	case f.CRC && p.CRC == CRCRefuse:
		return fail(iwerr.MPAInvalidReqReply, "responder requires CRC, policy refuses it")
	case !f.CRC && p.CRC == CRCRequired:
		return fail(iwerr.MPAInvalidReqReply, "responder did not confirm the required CRC")
	}
	out := Params{
		Revision:  rev,
		CRC:       req.CRC || f.CRC,
		MarkersTx: f.Markers,
		MarkersRx: req.Markers,
		LocalIRD:  clampIRDORD(p.IRD),
		LocalORD:  clampIRDORD(p.ORD),
	}
	enhanced := req.Enhanced && rev == 2 && f.Enhanced
	if !enhanced {
		if f.Enhanced && rev == 2 {
			return fail(iwerr.MPAInvalidReqReply, "reply has S but the request did not")
		}
		if req.Enhanced && (p.PeerToPeer || p.RequireEnhanced) {
			return fail(iwerr.MPAInvalidReqReply, "reply is not enhanced (Rev %d, S=%t)", rev, f.Enhanced)
		}
		out.PeerPrivateData = f.PrivateData
		return out, nil
	}
	e, ulp, err := ParseEnhanced(f.PrivateData)
	if err != nil {
		return fail(iwerr.MPAInvalidReqReply, "reply: %v", err)
	}
	out.Enhanced = true
	out.PeerIRD, out.PeerORD = e.IRD, e.ORD
	out.PeerPrivateData = ulp
	if e.ORD > out.LocalIRD {
		return fail(iwerr.MPAInsufficientIRD, "responder ORD %d exceeds our IRD %d", e.ORD, out.LocalIRD)
	}
	if out.LocalORD > e.IRD {
		if !p.LowerORD {
			return fail(iwerr.MPAInsufficientIRD, "our ORD %d exceeds responder IRD %d", out.LocalORD, e.IRD)
		}
		out.LocalORD = e.IRD
	}
	if p.PeerToPeer {
		if !e.PeerToPeer {
			return fail(iwerr.MPAInvalidReqReply, "responder did not echo the peer-to-peer flag")
		}
		offered := p.rtrTypes()
		chosen := e.rtrSet()
		t, ok := chosen.single()
		if !ok || !offered.Has(t) {
			return fail(iwerr.MPANoMatchingRTR, "offered RTR set %#x, responder chose %#x", uint8(offered), uint8(chosen))
		}
		out.PeerToPeer = true
		out.RTR = t
	}
	return out, nil
}

// Responder is the passive side: it handles the Request and answers it.
type Responder struct {
	p       Policy
	rev     uint8 // revision for the Reply (and a Reject)
	handled bool
}

// NewResponder returns a responder with policy p (see Policy.Validate).
func NewResponder(p Policy) *Responder { return &Responder{p: p, rev: p.revision()} }

// Reject returns a Reply with R=1 carrying privateData (cut to
// MaxPrivateData), for a ULP that refuses the connection. Send it, then close
// the TCP connection. It carries no IRD/ORD block.
func (r *Responder) Reject(privateData []byte) Frame {
	f := Frame{Reply: true, Reject: true, Revision: r.rev}
	if len(privateData) > 0 {
		f.PrivateData = privateData[:min(len(privateData), MaxPrivateData)]
	}
	return f
}

// HandleRequest checks the initiator's Request and returns the Reply to send
// and the negotiated parameters. On a *NegotiationError (always Reject=true)
// reply is a Reject frame: send it and close. ErrState if called twice.
func (r *Responder) HandleRequest(f Frame) (reply Frame, params Params, err error) {
	if r.handled {
		return Frame{}, Params{}, fmt.Errorf("mpa: responder: HandleRequest: %w", ErrState)
	}
	r.handled = true
	p := r.p
	fail := func(term iwerr.Error, format string, args ...any) (Frame, Params, error) {
		return r.Reject(nil), Params{}, negotiationErr(term, true, format, args...)
	}
	// The Reply carries the request's revision capped at ours; a Reject of
	// an unusable revision carries ours.
	if f.Revision >= 1 && f.Revision <= 2 {
		r.rev = min(f.Revision, r.rev)
	}
	if f.Reply {
		return fail(iwerr.MPAInvalidReqReply, "request has the reply key")
	}
	switch {
	case f.Revision > 2:
		return fail(iwerr.MPAInvalidReqReply, "request revision %d", f.Revision)
	case f.Revision == 0 && !p.AcceptRev0:
		return fail(iwerr.MPAInvalidReqReply, "request revision 0")
	}
	if f.Revision == 0 {
		r.rev = 0 // answer in kind, as siw does
	}
	if len(f.PrivateData) > MaxPrivateData {
		return fail(iwerr.MPAInvalidReqReply, "request has %d octets of private data", len(f.PrivateData))
	}
	if f.Reject {
		return fail(iwerr.MPAInvalidReqReply, "request has the R bit")
	}
	enhanced := f.Revision == 2 && f.Enhanced && r.rev == 2
	if p.RequireEnhanced && !enhanced {
		return fail(iwerr.MPAInvalidReqReply, "request is not enhanced (Rev %d, S=%t)", f.Revision, f.Enhanced)
	}
	if f.CRC && p.CRC == CRCRefuse {
		return fail(iwerr.MPAInvalidReqReply, "initiator requires CRC, policy refuses it")
	}
	reply = Frame{
		Reply:    true,
		Markers:  p.Markers,
		CRC:      f.CRC || p.CRC.asks(),
		Revision: r.rev,
	}
	params = Params{
		Revision:  r.rev,
		CRC:       reply.CRC,
		MarkersTx: f.Markers,
		MarkersRx: p.Markers,
		LocalIRD:  clampIRDORD(p.IRD),
		LocalORD:  clampIRDORD(p.ORD),
	}
	ulpOut := p.ulpPrivateData()
	if !enhanced {
		// An RFC 5044 responder does not know S: the private data is all
		// the ULP's, whatever its first octets.
		params.PeerPrivateData = f.PrivateData
		if r.rev == 1 || r.rev == 0 {
			ulpOut = p.PrivateData[:min(len(p.PrivateData), MaxPrivateData)]
		}
		if len(ulpOut) > 0 {
			reply.PrivateData = ulpOut
		}
		return reply, params, nil
	}
	e, ulpIn, err := ParseEnhanced(f.PrivateData)
	if err != nil {
		return fail(iwerr.MPAInvalidReqReply, "request has S but %v", err)
	}
	params.Enhanced = true
	params.PeerIRD, params.PeerORD = e.IRD, e.ORD
	params.PeerPrivateData = ulpIn
	params.LocalIRD = min(params.LocalIRD, e.ORD)
	params.LocalORD = min(params.LocalORD, e.IRD)
	out := Enhanced{IRD: params.LocalIRD, ORD: params.LocalORD}
	if e.PeerToPeer {
		common := e.rtrSet() & p.rtrTypes()
		var t RTRType
		switch {
		case common.Has(RTRWrite):
			t = RTRWrite
		case common.Has(RTRRead):
			t = RTRRead
		case common.Has(RTRSend):
			t = RTRSend
		default:
			return fail(iwerr.MPANoMatchingRTR, "initiator offered RTR set %#x, policy accepts %#x", uint8(e.rtrSet()), uint8(p.rtrTypes()))
		}
		out.PeerToPeer = true
		out.setRTR(t.set())
		params.PeerToPeer = true
		params.RTR = t
	}
	reply.Enhanced = true
	reply.PrivateData = append(out.Append(make([]byte, 0, EnhancedLen+len(ulpOut))), ulpOut...)
	return reply, params, nil
}
