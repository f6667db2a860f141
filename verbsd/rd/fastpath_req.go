package rd

import (
	"encoding/binary"
	"fmt"
	"net/netip"
	"sort"
	"sync/atomic"
	"unsafe"

	"github.com/iwarpd/iwarpd/ddp"
	"github.com/iwarpd/iwarpd/iwerr"
	"github.com/iwarpd/iwarpd/llp/dgram"
	"github.com/iwarpd/iwarpd/proto"
	"github.com/iwarpd/iwarpd/rdmap"
	"github.com/iwarpd/iwarpd/verbsd/rnic"
)

// The Read Requests and RFC 7306 Atomic Requests a rank sent itself and
// left outstanding at a take-over (issue 22; docs/fastpath.md "Reads and
// atomics the rank sends itself"; the page's request entries:
// proto/fastpath_rd.go). The response is a DATA datagram of the peer's
// sequence that reaches whoever owns the socket then; when that is the
// engine, it must recognise it as the rank's, or it would drop it
// (dropResponse) and the rank would wait for ever. So at the take-over the
// engine imports every entry the rank marked sent, checked, and resolves
// it when its Read Response, Atomic Response or error message arrives: it
// writes the response into the entry's data area of the page — nowhere
// else, so no sink address of the rank's is ever used and nothing outside
// the page can be reached through an entry — and marks the entry done or
// failed (the status and iWARP error of the error message). The rank
// completes its request when it owns the socket again, which the engine
// allows only once every imported request is resolved (fpQuiet): the
// provider's work request never becomes the daemon's, so no completion,
// CQ entry or SQ slot of the daemon's is involved.

// fpReq is one imported request of the rank's.
type fpReq struct {
	k    int    // its entry in the page
	kind uint32 // proto.FPRDReqRead or FPRDReqAtomic
	peer netip.AddrPort
	msn  uint32 // its MSN of QN 1
	id   uint32 // Read: the sink STag it named; atomic: its Request Identifier
	len  uint32 // Read: octets; atomic: 8
	to   uint64 // Read: the sink TO it named
	// Read: octets of its response placed so far (a peer with a smaller
	// datagram size answers in several segments).
	placed uint32
}

// fpImportReqs reads the request entries of page that the rank marked
// sent, checked against the slots it was given (exp) and the MSNs of QN 1
// it used since the hand-back, (expMSN, msn]: each names an exported
// slot, a kind and a length the page's data area holds, a distinct MSN in
// that range. Oldest (MSN) first. An entry out of its bounds is a
// violation: the QP fails.
func fpImportReqs(page []byte, exp []fpExported, expMSN, msn uint32) ([]fpReq, error) {
	if len(page) < proto.FastpathRDPageLen {
		return nil, fmt.Errorf("request entries of a page of %d octets", len(page))
	}
	var out []fpReq
	le := binary.LittleEndian
	for k := range proto.FPRDReqs {
		e := page[proto.FPRDReqOff(k) : proto.FPRDReqOff(k)+proto.FPRDReqLen]
		state := le.Uint32(e[proto.OffFPRDReqState:])
		switch state {
		case 0, proto.FPRDReqDone, proto.FPRDReqFailed:
			continue // free, or resolved and not yet seen by the rank
		case proto.FPRDReqSent:
		default:
			return nil, fmt.Errorf("request entry %d: State %d", k, state)
		}
		x := fpReq{k: k, kind: le.Uint32(e[proto.OffFPRDReqKind:]), msn: le.Uint32(e[proto.OffFPRDReqMSN:]),
			id: le.Uint32(e[proto.OffFPRDReqID:]), len: le.Uint32(e[proto.OffFPRDReqLenW:]), to: le.Uint64(e[proto.OffFPRDReqSinkTO:])}
		slot := le.Uint32(e[proto.OffFPRDReqSlot:])
		switch {
		case slot >= uint32(len(exp)):
			return nil, fmt.Errorf("request entry %d: Slot %d, but %d slots were given", k, slot, len(exp))
		case x.kind == proto.FPRDReqRead && (x.len == 0 || x.len > proto.FPRDCopyLen):
			return nil, fmt.Errorf("request entry %d: a Read of %d octets, want 1..%d", k, x.len, proto.FPRDCopyLen)
		case x.kind == proto.FPRDReqAtomic && x.len != rnic.AtomicLen:
			return nil, fmt.Errorf("request entry %d: an atomic of %d octets, want %d", k, x.len, rnic.AtomicLen)
		case x.kind != proto.FPRDReqRead && x.kind != proto.FPRDReqAtomic:
			return nil, fmt.Errorf("request entry %d: Kind %d", k, x.kind)
		case x.msn == expMSN || !dgram.SeqLessEq(expMSN, x.msn) || !dgram.SeqLessEq(x.msn, msn):
			return nil, fmt.Errorf("request entry %d: MSN %d is not one the rank used since the hand-back (%d, %d]", k, x.msn, expMSN, msn)
		}
		for _, o := range out {
			if o.msn == x.msn {
				return nil, fmt.Errorf("request entries %d and %d: both MSN %d", o.k, k, x.msn)
			}
		}
		x.peer = exp[slot].st.Addr
		out = append(out, x)
	}
	sort.Slice(out, func(i, j int) bool { return dgram.SeqLess(out[i].msn-expMSN, out[j].msn-expMSN) })
	return out, nil
}

// fpReqResolve writes entry x's outcome into the page (its response is
// in its data area already): Done, or Failed with status and term; and
// forgets x.
func (q *QP) fpReqResolve(i int, status proto.WCStatus, term uint32) {
	fp := &q.Rd.fp
	x := fp.reqs[i]
	mem := q.QP.QP.FP.Mem()
	e := mem[proto.FPRDReqOff(x.k):]
	state := proto.FPRDReqDone
	if status != proto.WCSuccess {
		state = proto.FPRDReqFailed
		binary.LittleEndian.PutUint32(e[proto.OffFPRDReqStatus:], uint32(status))
		binary.LittleEndian.PutUint32(e[proto.OffFPRDReqTerm:], term)
	}
	(*atomic.Uint32)(unsafe.Pointer(&e[proto.OffFPRDReqState])).Store(state)
	fp.reqs = append(fp.reqs[:i], fp.reqs[i+1:]...)
	q.Rd.count(fpReqsResolved, 1)
}

// fpReadResponse takes a Read Response segment from src when it answers
// the oldest imported Read to src (Read Responses come in the order of
// their requests, and the rank's were sent before anything the engine
// sent after the take-over): its sink STag, and the TO of the next octet
// to place. One naming something else is not the rank's. Placed into the
// entry's data area of the page (bounded by the Read's length, at most
// FPRDCopyLen: fpImportReqs); the last segment resolves it, done when it
// brought every octet asked for, as placeResponse completes a Read.
func (q *QP) fpReadResponse(src netip.AddrPort, h *ddp.Header, payload []byte) bool {
	for i := range q.Rd.fp.reqs {
		x := &q.Rd.fp.reqs[i]
		if x.kind != proto.FPRDReqRead || x.peer != src {
			continue
		}
		if h.Stag != x.id || h.TO != x.to+uint64(x.placed) {
			return false
		}
		if uint64(x.placed)+uint64(len(payload)) > uint64(x.len) {
			q.fpReqResolve(i, proto.WCRemOpErr, 0)
			return true
		}
		off := proto.FPRDReqDataOff(x.k) + int(x.placed)
		copy(q.QP.QP.FP.Mem()[off:off+len(payload)], payload)
		x.placed += uint32(len(payload))
		if h.Last {
			st := proto.WCSuccess
			if x.placed != x.len {
				st = proto.WCRemOpErr
			}
			q.fpReqResolve(i, st, 0)
		}
		return true
	}
	return false
}

// fpAtomicResponse takes an Atomic Response from src naming an imported
// atomic's Request Identifier: the original value goes into its data
// area (host order, as the daemon stores an atomic's result).
func (q *QP) fpAtomicResponse(src netip.AddrPort, resp *rdmap.AtomicResponse) bool {
	for i, x := range q.Rd.fp.reqs {
		if x.kind == proto.FPRDReqAtomic && x.peer == src && x.id == resp.ReqID {
			off := proto.FPRDReqDataOff(x.k)
			binary.NativeEndian.PutUint64(q.QP.QP.FP.Mem()[off:off+rnic.AtomicLen], resp.Original)
			q.fpReqResolve(i, proto.WCSuccess, 0)
			return true
		}
	}
	return false
}

// fpReqRefused takes an error message from src naming the MSN of QN 1 of
// an imported request: it fails with the error's status (a refused Read
// or atomic is never a success; the QP stays up, as for the daemon's own).
func (q *QP) fpReqRefused(src netip.AddrPort, msn uint32, err iwerr.Error) bool {
	for i, x := range q.Rd.fp.reqs {
		if x.peer == src && x.msn == msn {
			q.fpReqResolve(i, rnic.TermStatus(err), rnic.TermWord(err))
			return true
		}
	}
	return false
}

// fpExportReqIDs writes the QP's numbers of QN 1 for the rank (the
// hand-back) and remembers the MSN exported.
func (q *QP) fpExportReqIDs(mem []byte) {
	r := q.Rd
	if r.NextReqID == 0 {
		r.NextReqID = randReqID()
	}
	binary.LittleEndian.PutUint32(mem[proto.OffFPRDReadReqMSN:], r.msn[rdmap.QNReadRequest])
	binary.LittleEndian.PutUint32(mem[proto.OffFPRDNextReqID:], r.NextReqID)
	r.fp.expReqMSN = r.msn[rdmap.QNReadRequest]
}

// fpImportReqs takes the rank's numbers of QN 1 back and its outstanding
// requests (a take-over): an error fails the QP.
func (e *Engine) fpImportReqs(q *QP, mem []byte) error {
	r := q.Rd
	fp := &r.fp
	msn := binary.LittleEndian.Uint32(mem[proto.OffFPRDReadReqMSN:])
	reqs, err := fpImportReqs(mem, fp.exp[:fp.nExp], fp.expReqMSN, msn)
	if err != nil {
		return err
	}
	// Any value: a Request Identifier only names an atomic of the QP's,
	// and a rank that repeats one only confuses its own results.
	r.NextReqID = binary.LittleEndian.Uint32(mem[proto.OffFPRDNextReqID:])
	r.msn[rdmap.QNReadRequest] = msn
	fp.reqs = append(fp.reqs, reqs...)
	r.count(fpReqsTaken, int64(len(reqs)))
	return nil
}
