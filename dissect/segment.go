package dissect

import (
	"encoding/hex"

	"github.com/iwarpd/iwarpd/rdmap"
)

// segment is one decoded DDP segment with its RDMAP part.
type segment struct {
	ok       bool // DDP and RDMAP decoded
	event    *Event
	ddp      DDP
	rdmap    RDMAP
	llp      string
	findings []finding
}

// decodeSegment decodes the DDP segment b (from an FPDU or a datagram) into
// e and checks everything that needs no stream state.
func decodeSegment(e *Event, b []byte, llp string) segment {
	s := segment{event: e, llp: llp}
	if err := s.ddp.DecodeFromBytes(b, nil); err != nil {
		s.findings = append(s.findings, violationf("malformed DDP segment: %v", err))
		return s
	}
	h := &s.ddp.Header
	di := &DDPInfo{Tagged: h.Tagged, Last: h.Last, Version: h.Version, Reserved: h.Reserved, SegmentLen: len(b)}
	if h.Tagged {
		di.STag, di.TO = &h.Stag, &h.TO
	} else {
		di.QN, di.MSN, di.MO, di.InvStag = &h.QN, &h.MSN, &h.MO, h.ULPReserved
	}
	e.DDP = di
	ctrl := rdmap.Control(h.ULPControl)
	op := ctrl.Opcode()
	e.RDMAP = &RDMAPInfo{Opcode: uint8(op), Name: op.String(), Version: ctrl.Version(), Reserved: ctrl.Reserved()}
	s.rdmap = RDMAP{Control: ctrl, Tagged: h.Tagged}
	if err := s.rdmap.DecodeFromBytes(s.ddp.Payload, nil); err != nil {
		di.PayloadLen = len(s.ddp.Payload)
		s.findings = append(s.findings, violationf("malformed RDMAP header: %v", err))
		return s
	}
	di.PayloadLen = len(s.rdmap.Payload)
	r := &s.rdmap
	if r.HasReadRequest {
		q := &r.ReadRequest
		e.RDMAP.ReadRequest = &ReadRequestInfo{SinkStag: q.SinkStag, SinkTO: q.SinkTO, Size: q.Size, SourceStag: q.SourceStag, SourceTO: q.SourceTO}
	}
	if r.HasTerminate {
		t := &r.Terminate
		e.RDMAP.Terminate = &TerminateInfo{Layer: uint8(t.Err.Layer), EType: t.Err.Type, ECode: t.Err.Code, Error: t.Err.Error(),
			M: t.SegLenValid, D: t.DDPHeaderIncluded, R: t.RDMAPHeaderIncluded, SiwLayout: t.SiwLayout,
			DDPSegLen: t.DDPSegmentLength, DDPHeader: hex.EncodeToString(t.DDPHeader), RDMAHeader: hex.EncodeToString(t.RDMAPHeader)}
	}
	if r.HasAtomicRequest {
		a := &r.AtomicRequest
		e.RDMAP.Atomic = &AtomicInfo{Request: true, Op: a.Op.String(), ReqID: a.ReqID, Stag: a.Stag, TO: a.TO,
			AddSwap: a.AddSwap, AddSwapMask: a.AddSwapMask, Compare: a.Compare, CompareMask: a.CompareMask}
	}
	if r.HasAtomicResponse {
		e.RDMAP.Atomic = &AtomicInfo{ReqID: r.AtomicResponse.ReqID, Original: r.AtomicResponse.Original}
	}
	if r.HasImmediate {
		e.RDMAP.Immediate = &ImmediateInfo{Raw: hex.EncodeToString(r.Immediate.Raw[:]), Value: r.Immediate.Value(),
			Merged: r.Immediate.Merged()}
	}
	if r.HasWriteRecord {
		w := &r.WriteRecord
		e.RDMAP.WriteRecord = &WriteRecordInfo{RecordID: w.RecordID, MessageLength: w.MessageLength, MessageOffset: w.MessageOffset}
	}
	s.ok = true
	s.findings = append(s.findings, checkSegment(&s)...)
	return s
}
