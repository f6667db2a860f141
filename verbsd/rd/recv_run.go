package rd

import (
	"encoding/binary"
	"net/netip"
	"time"

	"github.com/iwarpd/iwarpd/ddp"
	"github.com/iwarpd/iwarpd/internal/crc32c"
	"github.com/iwarpd/iwarpd/llp/dgram"
	"github.com/iwarpd/iwarpd/llp/rd"
	"github.com/iwarpd/iwarpd/proto"
	"github.com/iwarpd/iwarpd/rdmap"
)

// The receive fast lane (docs/rd.md "Receive fast lane"). On a link of
// MTU 1500 a large message arrives as ~45 datagrams per GRO-coalesced
// slot, each of which paid the whole general path: key and RD header
// parse, the RD state machine (llp/rd Receive), the DDP/RDMAP parse and
// the dispatch of deliver — about a third of the receiving daemon's CPU
// (docs/benchmarks.md "MPI large messages"). A run is the datagrams that
// continue, from the same source, the DATA datagram the general path has
// just delivered: the next RD sequence numbers, the same key header and
// RD header but for Seq and the ACKREQ flag, the same message — a Send's
// segments (same QN, MSN, opcode, MO contiguous) or a Read Response's
// (same STag, TO contiguous) — each datagram's CRC checked when the QP
// checks CRC. Such a datagram is placed by the very functions deliver
// calls (placeSend, placeResponse: every bound of the target is checked
// there as on the general path), and llp/rd takes it with rd.Run: the
// receive space advances once per run, the acknowledgement is scheduled
// once. Nothing of a run is trusted beyond what the opener proved: the
// first datagram that differs in any field — a hole, a duplicate, another
// message, another offset, a bad CRC, another source — ends the run and
// goes to the general path, after the run is committed.

// runLane is the fast lane's state of a QP: the run being taken (active)
// and its template, the opener's headers.
type runLane struct {
	active bool
	ep     rd.Run
	src    netip.AddrPort
	now    time.Time
	// head: the opener's key header and RD header, Seq zeroed and
	// FlagAckReq cleared (the octets every datagram of the run repeats).
	head [runHeadLen]byte
	// seg: the opener's DDP header (hl octets), the Last flag cleared and
	// the offset (MO or TO) zeroed.
	seg    [ddp.UntaggedHeaderLen]byte
	hl     int
	tagged bool
	h      ddp.Header // the opener's, parsed
	off    uint64     // the MO (untagged) or TO (tagged) the next segment carries
	se     bool       // a Send with Solicited Event
	// m: a Send's message record, r.inMsg(src) while it is claimed or
	// discarding (a record is both only while in inMsgs: endInMsg clears
	// it, and the run then ends).
	m *inMsg
}

// runHeadLen is the key header and the RD header.
const runHeadLen = dgram.KeyHeaderLen + dgram.RDHeaderLen

// Offsets in a datagram of the RD header's flags octet and Seq.
const (
	runFlagsAt = dgram.KeyHeaderLen + 1
	runSeqAt   = dgram.KeyHeaderLen + 12
)

// runOpen opens a run after the general path delivered b (parsed: d)
// from src, when the next datagrams can continue it: the QP is up, no
// datagram waits in the backlog, b is a Send segment (not the last) whose
// receive took it, or a Read Response segment (not the last), and llp/rd
// agrees (rd.Endpoint.OpenRun).
func (e *Engine) runOpen(q *QP, src netip.AddrPort, b []byte, d *dgram.Datagram, now time.Time) {
	r := q.Rd
	ln := &r.run
	if r.noRun || (q.State != proto.QPStateRTR && q.State != proto.QPStateRTS) || len(r.backlog) > 0 ||
		len(b) < runHeadLen+crc32c.Size {
		return
	}
	seg := d.Segment
	h, hl, err := ddp.Parse(seg)
	if err != nil || h.Last || h.Version != ddp.Version || rdmap.Control(h.ULPControl).Version() != rdmap.Version {
		return
	}
	op := rdmap.Control(h.ULPControl).Opcode()
	payload := uint64(len(seg) - hl)
	var off uint64
	var m *inMsg
	switch {
	case h.Tagged && op == rdmap.OpReadResponse:
		off = h.TO + payload
	case !h.Tagged && h.QN == rdmap.QNSend && (op == rdmap.OpSend || op == rdmap.OpSendSE):
		m = r.inMsg(src)
		off = uint64(h.MO) + payload
		if m == nil || !m.claimed || m.discard || m.msn != h.MSN || uint64(m.got) != off || off == 0 {
			return // not placed (or the receive completed with an error): the general path goes on
		}
	default:
		return
	}
	if !r.ep.OpenRun(src, &d.RD, &ln.ep) {
		return
	}
	ln.active, ln.src, ln.now = true, src, now
	copy(ln.head[:], b[:runHeadLen])
	ln.head[runFlagsAt] &^= byte(dgram.FlagAckReq)
	clear(ln.head[runSeqAt : runSeqAt+4])
	ln.seg = [ddp.UntaggedHeaderLen]byte{}
	copy(ln.seg[:hl], seg[:hl])
	ln.seg[0] &^= 0x40 // Last
	if h.Tagged {
		clear(ln.seg[6:14]) // TO
	} else {
		clear(ln.seg[14:18]) // MO
	}
	ln.hl, ln.tagged, ln.h, ln.off, ln.se, ln.m = hl, h.Tagged, h, off, op == rdmap.OpSendSE, m
}

// runTake takes b from src into the active run and places it, and
// reports whether it did; false leaves b to the general path.
func (e *Engine) runTake(q *QP, src netip.AddrPort, b []byte) bool {
	r := q.Rd
	ln := &r.run
	hl := ln.hl
	if src != ln.src || len(b) < runHeadLen+hl+crc32c.Size ||
		(q.State != proto.QPStateRTR && q.State != proto.QPStateRTS) {
		return false
	}
	le := binary.LittleEndian
	flags := b[runFlagsAt]
	if le.Uint64(b) != le.Uint64(ln.head[:]) ||
		le.Uint64(b[8:])&^(uint64(dgram.FlagAckReq)<<8) != le.Uint64(ln.head[8:]) ||
		le.Uint32(b[16:]) != le.Uint32(ln.head[16:]) ||
		le.Uint64(b[24:]) != le.Uint64(ln.head[24:]) {
		return false
	}
	body := b[:len(b)-crc32c.Size]
	if !q.NoCRC && crc32c.Checksum(body) != crc32c.Get(b[len(body):]) {
		return false // dropped and counted by the general path (rd/crc_log.go)
	}
	seg := body[runHeadLen:]
	last := seg[0]&0x40 != 0
	var off uint64
	if ln.tagged {
		if seg[0]&^0x40 != ln.seg[0] || seg[1] != ln.seg[1] || le.Uint32(seg[2:]) != le.Uint32(ln.seg[2:]) {
			return false
		}
		off = binary.BigEndian.Uint64(seg[6:14])
	} else {
		if seg[0]&^0x40 != ln.seg[0] || seg[1] != ln.seg[1] || le.Uint32(seg[2:]) != le.Uint32(ln.seg[2:]) ||
			le.Uint64(seg[6:]) != le.Uint64(ln.seg[6:]) {
			return false
		}
		off = uint64(binary.BigEndian.Uint32(seg[14:18]))
	}
	if off != ln.off || !ln.ep.Take(binary.BigEndian.Uint32(b[runSeqAt:]), dgram.RDFlags(flags)&dgram.FlagAckReq != 0) {
		return false
	}
	// Taken by llp/rd: from here on it is delivered, as Receive's Deliver
	// is on the general path (deliverSeq).
	h := ln.h
	h.Last = last
	payload := seg[hl:]
	r.curSeq, r.curValid = binary.BigEndian.Uint32(b[runSeqAt:]), true
	if ln.tagged {
		h.TO = off
		e.placeResponse(q, src, &h, payload)
	} else {
		h.MO = uint32(off)
		e.placeSendTo(q, src, ln.m, &h, seg, hl, 0, ln.se)
		if !ln.m.claimed && !ln.m.discard {
			ln.active = false // the message ended (endInMsg): the record is no longer src's
		}
	}
	r.curValid = false
	r.count(runTaken, 1)
	ln.off += uint64(len(payload))
	if last || (!ln.tagged && ln.off > 1<<32-1) {
		ln.active = false // the message ended; what is taken is committed by runEnd
	}
	return true
}

// runEnd commits the run's datagrams to llp/rd and closes it: before the
// general path judges a datagram, before an error message holds back
// acknowledgements (sendError), and at the end of a receive batch.
func (e *Engine) runEnd(q *QP) {
	ln := &q.Rd.run
	if ln.ep.Pending() > 0 && !ln.ep.Commit(ln.now) {
		q.Rd.count(runLost, 1) // never: the endpoint was called with datagrams taken
	}
	ln.active, ln.m = false, nil
	ln.ep = rd.Run{}
}
