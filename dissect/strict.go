package dissect

import (
	"fmt"
	"slices"

	"github.com/iwarpd/iwarpd/ddp"
	"github.com/iwarpd/iwarpd/rdmap"
)

// finding is one result of a check: a violation (what -strict fails on) or
// a note.
type finding struct {
	violation bool
	msg       string
}

func violationf(format string, args ...any) finding {
	return finding{true, fmt.Sprintf(format, args...)}
}

func notef(format string, args ...any) finding { return finding{false, fmt.Sprintf(format, args...)} }

const (
	mpaFlagGSO      = 0x08 // siw's private GSO bit: tolerated, noted
	numUntaggedQNs  = 4    // QNs 0–3 are defined (RFC 5040, RFC 7306)
	maxRTRChoices   = 1
	rfc6581Revision = 2
)

func mpaInfo(m *MPAFrame) *MPAInfo {
	f := &m.Frame
	i := &MPAInfo{Revision: f.Revision, Markers: f.Markers, CRC: f.CRC, Reject: f.Reject, Enhanced: f.Enhanced,
		ReservedFlags: f.ReservedFlags, PrivateDataLen: len(f.PrivateData)}
	if m.HasEnhanced {
		e := m.Enhanced
		i.IRD, i.ORD = &e.IRD, &e.ORD
		i.PeerToPeer, i.SendRTR, i.WriteRTR, i.ReadRTR = e.PeerToPeer, e.SendRTR, e.WriteRTR, e.ReadRTR
	}
	return i
}

// checkFrame checks one MPA Request or Reply on its own (RFC 5044 §7.1,
// RFC 6581 §5).
func checkFrame(m *MPAFrame) []finding {
	var fs []finding
	f := &m.Frame
	what := "Request"
	if f.Reply {
		what = "Reply"
	}
	if f.Revision != 1 && f.Revision != rfc6581Revision {
		fs = append(fs, violationf("MPA %s revision %d (want 1 or 2)", what, f.Revision))
	}
	if f.ReservedFlags&mpaFlagGSO != 0 {
		fs = append(fs, notef("MPA %s has siw's GSO bit 0x08 set (ignored)", what))
	}
	if r := f.ReservedFlags &^ mpaFlagGSO; r != 0 {
		fs = append(fs, violationf("MPA %s reserved flag bits 0x%x set", what, r))
	}
	if f.Enhanced && f.Revision != rfc6581Revision {
		fs = append(fs, violationf("MPA %s has the S bit with revision %d", what, f.Revision))
	}
	if f.Enhanced && f.Revision == rfc6581Revision && !m.HasEnhanced {
		fs = append(fs, violationf("MPA %s: S bit set but no valid IRD/ORD block in the private data", what))
	}
	if !f.Reply && f.Reject {
		fs = append(fs, violationf("MPA Request has the R (reject) bit set"))
	}
	return fs
}

// checkNegotiation checks a Reply against its Request (RFC 5044 §7.1.2–§7.1.5,
// RFC 6581 §7–§9) and returns the RTR the initiator must send first.
func checkNegotiation(req, rep *MPAFrame) ([]finding, rtrKind) {
	var fs []finding
	q, p := &req.Frame, &rep.Frame
	if p.Revision > q.Revision {
		fs = append(fs, violationf("MPA Reply revision %d above the Request's %d", p.Revision, q.Revision))
	}
	if p.Reject {
		fs = append(fs, notef("MPA Reply rejects the connection"))
		return fs, rtrNone
	}
	if q.Revision == rfc6581Revision && p.Revision == rfc6581Revision && q.Enhanced != p.Enhanced {
		fs = append(fs, violationf("MPA Reply S bit %t does not match the Request's %t", p.Enhanced, q.Enhanced))
	}
	if !req.HasEnhanced || !rep.HasEnhanced {
		return fs, rtrNone
	}
	a, b := req.Enhanced, rep.Enhanced
	if a.ORD > b.IRD || b.ORD > a.IRD {
		fs = append(fs, notef("IRD/ORD mismatch: initiator IRD %d ORD %d, responder IRD %d ORD %d (RFC 6581 §7: TERMINATE 0x06 unless relaxed)",
			a.IRD, a.ORD, b.IRD, b.ORD))
	}
	if a.PeerToPeer != b.PeerToPeer {
		fs = append(fs, violationf("MPA Reply peer-to-peer flag %t does not echo the Request's %t (RFC 6581 §9.2)", b.PeerToPeer, a.PeerToPeer))
	}
	if !a.PeerToPeer || !b.PeerToPeer {
		return fs, rtrNone
	}
	if (b.SendRTR && !a.SendRTR) || (b.WriteRTR && !a.WriteRTR) || (b.ReadRTR && !a.ReadRTR) {
		fs = append(fs, violationf("MPA Reply selects an RTR type the Request did not offer"))
	}
	n := 0
	rtr := rtrNone
	for _, c := range []struct {
		on bool
		k  rtrKind
	}{{b.SendRTR, rtrSend}, {b.ReadRTR, rtrRead}, {b.WriteRTR, rtrWrite}} {
		if c.on {
			n++
			rtr = c.k
		}
	}
	switch {
	case n == 0:
		fs = append(fs, notef("peer-to-peer without an RTR type in the Reply (initiator should TERMINATE 0x07)"))
	case n > maxRTRChoices:
		fs = append(fs, violationf("MPA Reply selects %d RTR types (want one)", n))
		rtr = rtrNone
	}
	return fs, rtr
}

// checkSegment checks what one segment shows on its own: versions,
// reserved bits, the opcode table (tagged, QN, QP type) and header lengths.
func checkSegment(s *segment) []finding {
	var fs []finding
	h := &s.ddp.Header
	if h.Version != ddp.Version {
		fs = append(fs, violationf("DDP version %d (want %d)", h.Version, ddp.Version))
	}
	if h.Reserved != 0 {
		fs = append(fs, violationf("DDP reserved bits 0x%x set", h.Reserved))
	}
	c := s.rdmap.Control
	if c.Version() != rdmap.Version {
		fs = append(fs, violationf("RDMAP version %d (want %d)", c.Version(), rdmap.Version))
	}
	if c.Reserved() != 0 {
		fs = append(fs, violationf("RDMAP reserved bits 0x%x set", c.Reserved()))
	}
	op := c.Opcode()
	info, ok := op.Info()
	if !ok {
		return append(fs, violationf("undefined RDMAP opcode 0x%x", uint8(op)))
	}
	if info.Tagged != h.Tagged {
		fs = append(fs, violationf("%v sent with DDP T=%t", op, h.Tagged))
		return fs
	}
	if !h.Tagged && h.QN != info.QN {
		fs = append(fs, violationf("%v on QN %d (want %d)", op, h.QN, info.QN))
	}
	inv := op == rdmap.OpSendInvalidate || op == rdmap.OpSendSEInvalidate
	if !h.Tagged && !inv && h.ULPReserved != 0 {
		fs = append(fs, violationf("%v with RsvdULP[8:39] = 0x%08x (want 0)", op, h.ULPReserved))
	}
	switch s.llp {
	case LLPMPA:
		if info.QPTypes&rdmap.RC == 0 && op.IsWriteRecord() {
			fs = append(fs, violationf("%v is a datagram-profile opcode, reserved on RFC 5040 streams", op))
		} else if info.QPTypes&rdmap.RC == 0 {
			fs = append(fs, violationf("%v is not allowed on RC", op))
		}
	case LLPUD:
		if info.QPTypes&rdmap.UD == 0 {
			fs = append(fs, violationf("%v is not allowed on UD", op))
		}
	case LLPRD:
		if info.QPTypes&rdmap.RD == 0 {
			fs = append(fs, violationf("%v is not allowed on RD", op))
		}
	}
	r := &s.rdmap
	switch op {
	case rdmap.OpReadRequest, rdmap.OpTerminate, rdmap.OpAtomicRequest, rdmap.OpAtomicResponse:
		if !h.Last || h.MO != 0 {
			fs = append(fs, violationf("%v must be a single segment (L=1, MO=0)", op))
		}
		if len(r.Payload) != 0 {
			fs = append(fs, violationf("%v carries %d octets after its header", op, len(r.Payload)))
		}
	case rdmap.OpImmediateData, rdmap.OpImmediateDataSE:
		// RFC 7306: exactly 8 octets, one segment. The datagram profile's
		// Send with Immediate carries them before every segment's payload.
		if s.llp == LLPMPA && (!h.Last || h.MO != 0 || len(r.Payload) != 0) {
			fs = append(fs, violationf("%v must be its 8 octets in one segment (L=1, MO=0), has %d more", op, len(r.Payload)))
		}
	}
	fs = append(fs, checkAtomic(r)...)
	fs = append(fs, checkWriteRecord(h, r)...)
	if r.HasTerminate {
		t := &r.Terminate
		if t.SiwLayout {
			fs = append(fs, notef("Terminate control word in Linux siw's little-endian bitfield layout (decoded as %v)", t.Err))
		} else if t.Reserved != 0 {
			fs = append(fs, violationf("Terminate reserved bits 0x%x set", t.Reserved))
		}
		if !t.Err.Known() {
			fs = append(fs, violationf("Terminate with unregistered error %v", t.Err))
		}
	}
	return fs
}

// checkAtomic checks the fields of an RFC 7306 Atomic Request that a
// conforming sender sets: a defined operation, zero reserved bits. A
// misaligned target is legal on the wire (the responder refuses it): a
// note.
func checkAtomic(r *RDMAP) []finding {
	if !r.HasAtomicRequest {
		return nil
	}
	var fs []finding
	a := &r.AtomicRequest
	if !a.Op.Valid() {
		fs = append(fs, violationf("Atomic Request with reserved operation 0x%x", uint8(a.Op)))
	}
	if a.Reserved != 0 {
		fs = append(fs, violationf("Atomic Request reserved bits 0x%07x set", a.Reserved))
	}
	if a.TO%8 != 0 {
		fs = append(fs, notef("Atomic Request target TO 0x%x is not 8-octet aligned (the responder must refuse it)", a.TO))
	}
	return fs
}

// checkWriteRecord checks what a Write-Record segment (with or without
// Immediate Data; docs/wire-format.md §8) says of itself: its payload lies
// inside its message (Message Offset + payload ≤ Message Length), L is set
// exactly on the segment that ends the message, the message's base TO
// (TO − Message Offset) does not wrap, and the Immediate Data's octets 4–7
// are zero as the profile sends them.
func checkWriteRecord(h *ddp.Header, r *RDMAP) []finding {
	if !r.HasWriteRecord {
		return nil
	}
	var fs []finding
	w := &r.WriteRecord
	end := uint64(w.MessageOffset) + uint64(len(r.Payload))
	if end > uint64(w.MessageLength) {
		fs = append(fs, violationf("Write-Record %d: segment ends at message offset %d, beyond its Message Length %d", w.RecordID, end, w.MessageLength))
	} else if h.Last != (end == uint64(w.MessageLength)) {
		fs = append(fs, violationf("Write-Record %d: L=%t on a segment ending at offset %d of %d", w.RecordID, h.Last, end, w.MessageLength))
	}
	if h.TO < uint64(w.MessageOffset) {
		fs = append(fs, violationf("Write-Record %d: TO 0x%x below its Message Offset %d (base TO wraps)", w.RecordID, h.TO, w.MessageOffset))
	}
	if r.HasImmediate && [4]byte(r.Immediate.Raw[4:]) != [4]byte{} {
		fs = append(fs, violationf("Write-Record %d: Immediate Data octets 4-7 are %x (the profile sends zeros)", w.RecordID, r.Immediate.Raw[4:]))
	}
	return fs
}

// checker follows one direction (RC) or one source/destination pair
// (datagrams) and checks message continuity: MSN per QN from 1, MO
// contiguous from 0, L on the last segment, TO continuity, Read Responses
// against the peer's Read Requests, nothing after a Terminate. With lenient
// set (datagrams: loss and reordering are legal) continuity findings are
// notes.
type checker struct {
	lenient    bool
	peer       *checker
	untagged   [numUntaggedQNs]untaggedState
	tagged     map[rdmap.Opcode]*taggedState
	reads      []rdmap.ReadRequest // Read Requests sent in this direction, not yet answered
	atomics    map[uint32]bool     // Request Identifiers of Atomic Requests sent in this direction, not yet answered
	terminated bool
}

type untaggedState struct {
	active  bool // a message is in progress (no L yet)
	msn     uint32
	nextMO  uint32
	lastMSN uint32
}

type taggedState struct {
	active bool
	stag   uint32
	nextTO uint64
	got    uint64
	read   *rdmap.ReadRequest // the request a Read Response answers
}

func newChecker(lenient bool) *checker {
	return &checker{lenient: lenient, tagged: map[rdmap.Opcode]*taggedState{}}
}

func (c *checker) problem(format string, args ...any) finding {
	if c.lenient {
		return notef(format, args...)
	}
	return violationf(format, args...)
}

// segment checks s (already decoded and checked by checkSegment).
func (c *checker) segment(s *segment) []finding {
	var fs []finding
	h := &s.ddp.Header
	op := s.rdmap.Opcode()
	if c.terminated && !c.lenient {
		fs = append(fs, violationf("%v after a Terminate", op))
	}
	if op == rdmap.OpTerminate {
		c.terminated = true
	}
	segLen := uint64(len(s.ddp.Payload))
	if !h.Tagged {
		if h.QN >= numUntaggedQNs {
			return fs
		}
		st := &c.untagged[h.QN]
		start := !st.active
		if st.active && h.MSN != st.msn {
			fs = append(fs, c.problem("QN %d MSN %d ended without L (next segment has MSN %d)", h.QN, st.msn, h.MSN))
			start = true
		} else if st.active && h.MO != st.nextMO {
			fs = append(fs, c.problem("QN %d MSN %d: MO %d, want %d", h.QN, h.MSN, h.MO, st.nextMO))
		}
		if start {
			if want := st.lastMSN + 1; h.MSN != want {
				fs = append(fs, c.problem("QN %d: MSN %d, want %d", h.QN, h.MSN, want))
			}
			if h.MO != 0 {
				fs = append(fs, c.problem("QN %d MSN %d: first segment has MO %d", h.QN, h.MSN, h.MO))
			}
			st.lastMSN = h.MSN
		}
		st.active, st.msn, st.nextMO = !h.Last, h.MSN, h.MO+uint32(segLen)
		if op == rdmap.OpReadRequest && s.rdmap.HasReadRequest {
			c.reads = append(c.reads, s.rdmap.ReadRequest)
		}
		if op == rdmap.OpAtomicRequest && s.rdmap.HasAtomicRequest {
			if c.atomics == nil {
				c.atomics = map[uint32]bool{}
			}
			c.atomics[s.rdmap.AtomicRequest.ReqID] = true
		}
		if op == rdmap.OpAtomicResponse && s.rdmap.HasAtomicResponse {
			id := s.rdmap.AtomicResponse.ReqID
			if c.peer == nil || !c.peer.atomics[id] {
				fs = append(fs, c.problem("Atomic Response to Request Identifier %d, which no outstanding Atomic Request has", id))
			} else {
				delete(c.peer.atomics, id)
			}
		}
		return fs
	}
	if op.IsWriteRecord() {
		return fs // each Write-Record segment is self-describing (checkWriteRecord)
	}
	st := c.tagged[op]
	if st == nil {
		st = &taggedState{}
		c.tagged[op] = st
	}
	start := !st.active
	if st.active && (h.Stag != st.stag || h.TO != st.nextTO) {
		fs = append(fs, c.problem("%v STag 0x%08x: segment at STag 0x%08x TO 0x%x, want TO 0x%x (missing L?)", op, st.stag, h.Stag, h.TO, st.nextTO))
		start = true
	}
	if start {
		st.got, st.read = 0, nil
		if op == rdmap.OpReadResponse {
			if c.peer == nil || len(c.peer.reads) == 0 {
				fs = append(fs, c.problem("Read Response without an outstanding Read Request"))
			} else {
				rr := c.peer.reads[0]
				c.peer.reads = c.peer.reads[1:]
				st.read = &rr
				if h.Stag != rr.SinkStag || h.TO != rr.SinkTO {
					fs = append(fs, c.problem("Read Response at STag 0x%08x TO 0x%x, Read Request sink is 0x%08x/0x%x", h.Stag, h.TO, rr.SinkStag, rr.SinkTO))
				}
			}
		}
	}
	if h.TO+segLen < h.TO {
		fs = append(fs, violationf("%v: TO 0x%x + %d wraps", op, h.TO, segLen))
	}
	st.active, st.stag, st.nextTO = !h.Last, h.Stag, h.TO+segLen
	st.got += segLen
	if h.Last && st.read != nil && st.got != uint64(st.read.Size) {
		fs = append(fs, c.problem("Read Response of %d octets, Read Request size %d", st.got, st.read.Size))
	}
	return fs
}

// finish reports what is unfinished at the end of the capture.
func (c *checker) finish() []finding {
	var fs []finding
	for qn := range c.untagged {
		if st := &c.untagged[qn]; st.active {
			fs = append(fs, notef("capture ends inside QN %d message MSN %d", qn, st.msn))
		}
	}
	ops := make([]rdmap.Opcode, 0, len(c.tagged))
	for op := range c.tagged {
		ops = append(ops, op)
	}
	slices.Sort(ops)
	for _, op := range ops {
		if st := c.tagged[op]; st.active {
			fs = append(fs, notef("capture ends inside %v to STag 0x%08x", op, st.stag))
		}
	}
	return fs
}
