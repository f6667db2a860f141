package ud

import (
	"encoding/binary"
	"net/netip"
	"time"

	"github.com/iwarpd/iwarpd/ddp"
	"github.com/iwarpd/iwarpd/internal/crc32c"
	"github.com/iwarpd/iwarpd/proto"
	"github.com/iwarpd/iwarpd/rdmap"
	"github.com/iwarpd/iwarpd/verbsd/rnic"
)

// The target side of RDMA Write-Record (docs/write-record.md).
//
// Every segment is checked on its own before anything of it is placed:
// DDP/RDMAP versions, opcode 0xC, the Write-Record header's consistency
// (Message Offset + payload ≤ Message Length, L exactly on the segment that
// ends the message, base TO = TO − Message Offset without wrap), then the
// access checks of an RC RDMA Write (the STag is an rkey of a valid MR of
// the QP's PD granting RemoteWrite, [TO, TO+n) inside it). A segment that
// fails the access checks is dropped and counted, one error message (a
// Terminate on QN 2 with its DDP header) goes back to the source (not for
// a datagram received on a multicast group), and its whole record fails:
// what earlier segments placed stays placed, but the record never
// completes and later segments of it are dropped (a peer-caused error: no
// completion, the QP stays up). Valid segments are copied from the receive
// slot straight into the MR. A Write-Record with Immediate (opcode 0xD)
// carries its Immediate Data after the Write-Record header of every
// segment; every segment of a record must carry the same opcode and value
// (else it is dropped as inconsistent), and the record's completion has
// WCFlagImm and the value in Imm.
//
// A record completes exactly once: when every octet is placed, or (UD)
// when no segment of it arrived for Config.ReassemblyTimeout, then with
// WCFlagRecordTrim. The completion consumes the next posted receive: CQE
// WCRecvWriteRecord, Src, InvStag = STag, TO = base TO, ByteLen = Message
// Length; the receive's buffer gets the record (u32 count, count × {u32
// offset, u32 length}, little-endian, offsets from the base TO; as many
// ranges as fit, WCFlagRecordTrim when some did not). A buffer shorter than
// 4 octets completes with WCLocLenErr. No receive posted: the record is
// dropped and counted (its data stays placed).

// WrecHeaderLen is the tagged DDP header plus the Write-Record header;
// wrecImmHeaderLen with the Immediate Data of opcode 0xD.
const (
	WrecHeaderLen    = ddp.TaggedHeaderLen + rdmap.WriteRecordLen
	wrecImmHeaderLen = ddp.TaggedHeaderLen + rdmap.WriteRecordImmLen
)

// writeRecordSegment judges the tagged datagram of n octets at off of receive
// slot i (CRC already checked) and places it.
func (e *Engine) writeRecordSegment(q *QP, i, off, n int, now time.Time) {
	s := &e.Rb.Slots[i]
	body := n - crc32c.Size // ≥ TaggedHeaderLen (datagram checked)
	var hb [wrecImmHeaderLen]byte
	rnic.CopyRange(hb[:min(body, wrecImmHeaderLen)], s.View, off)
	h, _, err := ddp.Parse(hb[:ddp.TaggedHeaderLen])
	if err != nil {
		e.count(q, rnic.CDropTruncated, 1)
		return
	}
	ctl := rdmap.Control(h.ULPControl)
	if h.Version != ddp.Version || ctl.Version() != rdmap.Version {
		e.count(q, rnic.CDropBadVersion, 1)
		return
	}
	if !ctl.Opcode().IsWriteRecord() { // the only tagged opcodes on UD
		e.count(q, rnic.CDropTagged, 1)
		return
	}
	seg := WrecSegment{Src: s.Src, srcQKey: e.Rb.srcQKey, H: h, DdpHdr: hb[:ddp.TaggedHeaderLen], SegLen: body,
		Pieces: s.View, Quiet: e.Rb.mcast}
	hl, ok := seg.ParseHeader(hb[:min(body, wrecImmHeaderLen)])
	if !ok {
		e.count(q, rnic.CDropTruncated, 1)
		return
	}
	seg.off, seg.N = off+hl, body-hl
	r, st := e.AcceptWriteRecord(q, &seg, now)
	if st != RecordComplete {
		return
	}
	e.CompleteRecord(q, r, e.recvFor(q), true)
}

// WrecSegment is one received Write-Record segment: its headers and where
// its payload lies (n octets at off of pieces).
type WrecSegment struct {
	Src     netip.AddrPort
	srcQKey uint32 // the source's Q_Key, for the error message
	H       ddp.Header
	wr      rdmap.WriteRecord
	DdpHdr  []byte // the 14-octet tagged header as received (for the error message)
	SegLen  int    // DDP segment length (headers and payload)
	Pieces  [][]byte
	off, N  int
	Quiet   bool   // send no error message (received on a multicast group; RD reports it itself)
	hasImm  bool   // opcode 0xD: a Write-Record with Immediate
	imm     uint32 // its immediate value (octets 0–3 of the Immediate Data)
}

// ParseHeader decodes the Write-Record header (and, for opcode 0xD, the
// Immediate Data) from b, the segment's first octets from its tagged DDP
// header on (sg.h parsed), and returns the octets before the payload;
// false: the segment is shorter than its headers.
func (sg *WrecSegment) ParseHeader(b []byte) (int, bool) {
	if rdmap.Control(sg.H.ULPControl).Opcode() == rdmap.OpWriteRecordImm {
		w, _, err := rdmap.ParseWriteRecordImm(b[min(len(b), ddp.TaggedHeaderLen):])
		sg.wr, sg.hasImm, sg.imm = w.WriteRecord, true, w.Imm.Value()
		return wrecImmHeaderLen, err == nil
	}
	w, _, err := rdmap.ParseWriteRecord(b[min(len(b), ddp.TaggedHeaderLen):])
	sg.wr = w
	return WrecHeaderLen, err == nil
}

type recordStatus uint8

const (
	recordPending  recordStatus = iota // placed, the record is not complete yet
	RecordComplete                     // placed, the record is complete: the caller completes it
	recordDropped                      // dropped (counted): malformed, duplicate, record failed
	RecordRefused                      // refused by the access checks (error message sent)
)

// AcceptWriteRecord validates and places one segment. On RecordComplete the
// record has left the table and the caller must hand it to CompleteRecord.
func (e *Engine) AcceptWriteRecord(q *QP, sg *WrecSegment, now time.Time) (*WrecRecord, recordStatus) {
	h, wr := &sg.H, &sg.wr
	n := uint64(sg.N)
	end := uint64(wr.MessageOffset) + n
	if end > uint64(wr.MessageLength) || h.Last != (end == uint64(wr.MessageLength)) ||
		(n == 0 && wr.MessageLength != 0) || h.TO < uint64(wr.MessageOffset) {
		e.count(q, rnic.CWrecDropped, 1)
		return nil, recordDropped
	}
	key := WrecKey{Src: sg.Src, Stag: h.Stag, Id: wr.RecordID}
	t := &q.wrec
	// A live record's key is never in an unexpired tombstone (every Bury
	// removes the record from live first, a record is only added when its
	// key is not Dead), so the tombstones are scanned once per record, not
	// once per segment: with a full ring (256) that scan was 35 % of a
	// target daemon's CPU in a 1 MiB MPI_Put run (docs/mpi.md, issue 22).
	i := t.find(key)
	if i < 0 && t.Dead(key, now) {
		e.count(q, rnic.CWrecDropped, 1)
		return nil, recordDropped
	}
	dst, fault := e.RemoteAccess(q.QP, sg.Src, h.Stag, h.TO, n, proto.AccessRemoteWrite, now) // rnic/access_guard.go
	if fault != 0 {
		e.count(q, rnic.CWrecAccessErr, 1)
		if i >= 0 {
			t.remove(i)
		}
		t.Bury(key, e.tombstone(now))
		if !sg.Quiet && e.ErrorReplyAllowed(q.QP, sg.Src, now) {
			e.sendErrorMessage(q, sg.Src, sg.srcQKey, rnic.DgramAccessError, sg.DdpHdr, sg.SegLen)
		}
		return nil, RecordRefused
	}
	base := h.TO - uint64(wr.MessageOffset)
	if i < 0 {
		if len(t.live) >= e.Cfg.MaxPartial {
			old := t.remove(t.oldest())
			t.Bury(old.key, e.tombstone(now))
			e.count(q, rnic.CWrecEvicted, 1)
		}
		t.live = append(t.live, &WrecRecord{key: key, base: base, length: wr.MessageLength, hasImm: sg.hasImm, imm: sg.imm})
		i = len(t.live) - 1
	}
	r := t.live[i]
	if r.base != base || r.length != wr.MessageLength || r.hasImm != sg.hasImm || r.imm != sg.imm {
		e.count(q, rnic.CWrecDropped, 1)
		return nil, recordDropped
	}
	if _, ok := r.Place(wr.MessageOffset, uint32(end)); !ok {
		t.remove(i)
		t.Bury(key, e.tombstone(now))
		e.count(q, rnic.CWrecDropped, 1)
		return nil, recordDropped
	}
	rnic.CopyRange(dst, sg.Pieces, sg.off)
	if e.CommitOne(dst) != nil { // rnic/stage.go: the target's process memory went away
		e.count(q, rnic.CWrecAccessErr, 1)
		t.remove(i)
		t.Bury(key, e.tombstone(now))
		if !sg.Quiet {
			e.sendErrorMessage(q, sg.Src, sg.srcQKey, rnic.DgramAccessError, sg.DdpHdr, sg.SegLen)
		}
		return nil, RecordRefused
	}
	e.count(q, rnic.CWrecPlaced, 1)
	r.deadline = now.Add(e.Cfg.ReassemblyTimeout)
	if r.Got < uint64(r.length) || (r.length == 0 && !h.Last) {
		return nil, recordPending
	}
	t.remove(i)
	t.Bury(key, e.tombstone(now))
	return r, RecordComplete
}

// tombstone is when the key of a record ended now may be reused
// (computed only when a record ends, not for every segment).
func (e *Engine) tombstone(now time.Time) time.Time { return now.Add(4 * e.Cfg.ReassemblyTimeout) }

// HeadRecv loads the head of q's receive ring (outside a receive batch), or
// returns nil when none is posted or it is bad (then it completed with an
// error and q went to ERROR).
func (e *Engine) HeadRecv(q *QP) *rnic.RecvWR {
	if q.State != proto.QPStateRTR && q.State != proto.QPStateRTS {
		return nil
	}
	slot, err := q.RecvRing().Peek()
	if err != nil {
		e.count(q, rnic.CWRErrors, 1)
		e.errorQP(q, "receive queue producer index is corrupt")
		return nil
	}
	if slot == nil {
		return nil
	}
	w := &q.wrec.recv
	if st := e.LoadRecv(q, w, slot); st != proto.WCSuccess {
		e.FailWR(q, q.RecvCQ, w.WRID, proto.WCRecv, st)
		return nil
	}
	return w
}

// expireRecords completes, partly placed, the records of q whose deadline
// passed (UD).
func (e *Engine) expireRecords(q *QP, now time.Time) bool {
	t := &q.wrec
	work := false
	for i := 0; i < len(t.live); {
		if !t.live[i].deadline.Before(now) {
			i++
			continue
		}
		r := t.remove(i)
		t.Bury(r.key, now.Add(4*e.Cfg.ReassemblyTimeout))
		e.CompleteRecord(q, r, e.HeadRecv(q), false)
		work = true
	}
	return work
}

// CompleteQuiet completes r without a receive or a CQE when q was created
// with quiet_records and r is a Write-Record without Immediate
// (proto.CreateQPRequest.QuietRecords): it is counted, nothing else.
// false: r needs CompleteRecord.
func (e *Engine) CompleteQuiet(q *QP, r *WrecRecord) bool {
	if !q.QuietRecords || r.hasImm {
		return false
	}
	if r.Got < uint64(r.length) {
		e.count(q, rnic.CWrecTrimmed, 1)
	} else {
		e.count(q, rnic.CWrecComplete, 1)
	}
	e.count(q, rnic.CMessagesIn, 1)
	e.count(q, rnic.CBytesIn, int64(r.Got))
	return true
}

// CompleteRecord consumes receive w (nil: none posted) with r's completion.
// inBatch says w came from recvFor in the current receive batch.
func (e *Engine) CompleteRecord(q *QP, r *WrecRecord, w *rnic.RecvWR, inBatch bool) {
	if w == nil {
		e.count(q, rnic.CWrecNoRecv, 1)
		return
	}
	flags := proto.WCFlagSrcValid
	if r.hasImm {
		flags |= proto.WCFlagImm
	}
	status := proto.WCSuccess
	if r.Got < uint64(r.length) {
		flags |= proto.WCFlagRecordTrim
		e.count(q, rnic.CWrecTrimmed, 1)
	} else {
		e.count(q, rnic.CWrecComplete, 1)
	}
	if w.Total < 4 {
		status = proto.WCLocLenErr
	} else {
		fit := min(len(r.Spans), (w.Total-4)/8)
		if fit < len(r.Spans) {
			flags |= proto.WCFlagRecordTrim
		}
		b := binary.LittleEndian.AppendUint32(q.wrec.scratch[:0], uint32(fit))
		for _, s := range r.Spans[:fit] {
			b = binary.LittleEndian.AppendUint32(b, s.Start)
			b = binary.LittleEndian.AppendUint32(b, s.End-s.Start)
		}
		q.wrec.scratch = b[:0]
		rnic.Scatter(w.Bufs, b)
		if e.Commit(w.Bufs, 0, len(b)) != nil { // rnic/stage.go
			status = proto.WCLocProtErr
		}
	}
	c := q.RecvRing()
	c.Advance()
	c.Release()
	if inBatch {
		e.Rb.Used++
	}
	w.Valid = false
	e.count(q, rnic.CMessagesIn, 1)
	e.count(q, rnic.CBytesIn, int64(r.Got))
	e.PostCQE(q.Session, q.RecvCQ, &proto.CQE{WRID: w.WRID, Status: status, Opcode: proto.WCRecvWriteRecord, Flags: flags,
		ByteLen: r.length, QPN: q.QPN, Src: r.key.Src, InvStag: r.key.Stag, TO: r.base, Imm: r.imm})
}
