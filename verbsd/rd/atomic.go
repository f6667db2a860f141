package rd

import (
	"encoding/binary"
	"math/rand/v2"
	"net/netip"

	"github.com/iwarpd/iwarpd/ddp"
	"github.com/iwarpd/iwarpd/iwerr"
	"github.com/iwarpd/iwarpd/proto"
	"github.com/iwarpd/iwarpd/rdmap"
	"github.com/iwarpd/iwarpd/verbsd/rnic"
)

// RFC 7306 atomics and Send with Immediate on RD (docs/atomics.md).
//
// The messages are RC's: an Atomic Request (untagged QN 1, sharing the MSNs
// and the ORD/IRD of RDMA Reads), answered by an Atomic Response (untagged
// QN 3) naming its Request Identifier, each one RD DATA datagram sent
// reliably. The requester matches a response by (peer, Request Identifier),
// not by order.
//
// Exactly once. The RD layer (llp/rd) delivers each datagram exactly once
// per life of the peers, and the response is itself reliable, so a lost
// request or response is retransmitted by the LLP and never re-executed.
// The replay cache is the second guard, for what the LLP admits may be
// delivered again: a datagram of a sequence space the receiver had
// already forgotten (idle reclamation, a peer restart; llp/rd doc.go).
// The responder remembers the outcome of the last atomicCacheSize
// atomics it executed per QP, keyed by (source address, Request
// Identifier) and checked against the whole request: a request found there
// is answered with the remembered original value and not executed again.
// Request Identifiers start at a random value per requester QP, so a
// restarted requester is not confused with its previous life (and a
// different request with a reused identifier does not match: it runs).

// atomicCacheSize bounds the replay cache of an RD QP (about 100 octets
// an entry).
const atomicCacheSize = 1024

type atomicKey struct {
	peer  netip.AddrPort
	reqID uint32
}

type atomicEntry struct {
	req  rdmap.AtomicRequest
	orig uint64
}

// atomicCache remembers executed atomics, oldest evicted first.
type atomicCache struct {
	m    map[atomicKey]atomicEntry
	ring []atomicKey
	next int
}

func (c *atomicCache) get(k atomicKey) (atomicEntry, bool) {
	v, ok := c.m[k]
	return v, ok
}

func (c *atomicCache) put(k atomicKey, v atomicEntry) {
	if c.m == nil {
		c.m = make(map[atomicKey]atomicEntry)
	}
	if _, ok := c.m[k]; !ok {
		if len(c.ring) < atomicCacheSize {
			c.ring = append(c.ring, k)
		} else {
			delete(c.m, c.ring[c.next])
			c.ring[c.next] = k
			c.next = (c.next + 1) % atomicCacheSize
		}
	}
	c.m[k] = v
}

// prepareAtomic validates an atomic work request into w and builds its
// Atomic Request.
func (e *Engine) prepareAtomic(q *QP, w *wr, sqe *proto.SQE, slot []byte, inline bool) proto.WCStatus {
	r := q.Rd
	req, sge, st := rnic.AtomicRequest(q.QP.QP, sqe, slot, inline)
	if st != proto.WCSuccess {
		return st
	}
	if r.NextReqID == 0 {
		r.NextReqID = randReqID()
	}
	r.NextReqID++
	req.ReqID = r.NextReqID
	w.reqID = req.ReqID
	req.Append(w.areq[:0])
	w.sink, w.total = sge, rnic.AtomicLen
	r.msn[rdmap.QNReadRequest]++
	w.msn = r.msn[rdmap.QNReadRequest]
	w.segs, _ = ddp.UntaggedSegments(uint8(rdmap.MakeControl(rdmap.OpAtomicRequest)), 0, rdmap.QNReadRequest, w.msn,
		rdmap.AtomicRequestLen, e.RdMaxPayload(false, 0))
	return proto.WCSuccess
}

// randReqID is a QP's first Request Identifier.
func randReqID() uint32 { return rand.Uint32() | 1 }

// RdAtomicRequest executes (or answers from the replay cache) an Atomic
// Request from src, or answers with an error message; nothing is modified
// on an error, and the QP stays up.
func (e *Engine) RdAtomicRequest(q *QP, src netip.AddrPort, h *ddp.Header, seg []byte, hl int) {
	r := q.Rd
	req, _, err := rdmap.ParseAtomicRequest(seg[hl:])
	if err != nil || !h.Last || h.MO != 0 || len(seg) != hl+rdmap.AtomicRequestLen {
		e.badMessage(q, src, iwerr.RDMAPOperationUnspecified, seg, hl)
		return
	}
	k := atomicKey{src, req.ReqID}
	if v, ok := r.atomicSeen.get(k); ok && v.req == req {
		e.count(q, rnic.CAtomicReplays, 1)
		e.queueAtomicResponse(q, src, req.ReqID, v.orig)
		return
	}
	b, terr := q.AtomicTarget(&req)
	if terr != (iwerr.Error{}) {
		r.count(accessErrors, 1)
		e.count(q, rnic.CAtomicErrors, 1)
		e.sendError(q, src, terr, seg[:hl], nil, len(seg))
		return
	}
	orig := rnic.AtomicExecute(b, &req)
	e.count(q, rnic.CAtomicsIn, 1)
	r.atomicSeen.put(k, atomicEntry{req: req, orig: orig})
	e.queueAtomicResponse(q, src, req.ReqID, orig)
}

// queueAtomicResponse queues the Atomic Response to src, sent reliably
// with the error messages (fill).
func (e *Engine) queueAtomicResponse(q *QP, src netip.AddrPort, reqID uint32, orig uint64) {
	r := q.Rd
	r.msn[rdmap.QNAtomicResponse]++
	dh := ddp.Header{Last: true, Version: ddp.Version, ULPControl: uint8(rdmap.MakeControl(rdmap.OpAtomicResponse)),
		QN: rdmap.QNAtomicResponse, MSN: r.msn[rdmap.QNAtomicResponse]}
	resp := rdmap.AtomicResponse{ReqID: reqID, Original: orig}
	body := resp.Append(dh.Append(make([]byte, 0, ddp.UntaggedHeaderLen+rdmap.AtomicResponseLen)))
	r.errs = append(r.errs, &errMsg{seq: r.nextErr, peer: src, body: body, atomic: true})
	r.nextErr++
	r.atomicOut++
}

// atomicResponse completes the atomic from src that an Atomic Response
// names: the original value goes into its result buffer (host order).
func (e *Engine) atomicResponse(q *QP, src netip.AddrPort, h *ddp.Header, seg []byte, hl int) {
	r := q.Rd
	resp, _, err := rdmap.ParseAtomicResponse(seg[hl:])
	if err != nil || !h.Last || h.MO != 0 || len(seg) != hl+rdmap.AtomicResponseLen {
		e.badMessage(q, src, iwerr.RDMAPOperationUnspecified, seg, hl)
		return
	}
	if q.fpAtomicResponse(src, &resp) { // the rank's own, taken over (rd/fastpath_req.go)
		return
	}
	for _, w := range r.wrs {
		if !w.op.Atomic() || w.peer != src || w.reqID != resp.ReqID || w.sent == 0 || w.done {
			continue
		}
		b, st := q.Translate(w.sink, q.PD, true)
		if st != proto.WCSuccess {
			w.done, w.status = true, st
			return
		}
		binary.NativeEndian.PutUint64(b, resp.Original)
		w.done, w.status = true, proto.WCSuccess
		if e.CommitOne(b) != nil { // rnic/stage.go: a process-memory result buffer went away
			w.status = proto.WCLocProtErr
		}
		return
	}
	r.count(dropResponse, 1) // a duplicate, or for a request given up
}

// placeSendImm places a segment of a Send with Immediate: the datagram
// profile's Immediate Data opcode, its 8 octets before every segment's
// payload; the receive completes with the value (WCFlagImm).
func (e *Engine) placeSendImm(q *QP, src netip.AddrPort, h *ddp.Header, seg []byte, hl int, solicited bool) {
	r := q.Rd
	d, _, err := rdmap.ParseImmediateData(seg[hl:])
	if err != nil {
		e.badMessage(q, src, iwerr.RDMAPOperationUnspecified, seg, hl)
		return
	}
	r.curImm, r.curHasImm = d.Value(), true
	e.placeSend(q, src, h, seg, hl, rdmap.ImmediateDataLen, solicited)
	r.curImm, r.curHasImm = 0, false
}
