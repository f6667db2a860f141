package rd

import (
	"encoding/binary"
	"net/netip"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/iwarpd/iwarpd/ddp"
	"github.com/iwarpd/iwarpd/llp/dgram"
	"github.com/iwarpd/iwarpd/llp/rd"
	"github.com/iwarpd/iwarpd/proto"
	"github.com/iwarpd/iwarpd/rdmap"
	"github.com/iwarpd/iwarpd/verbsd/rnic"
	"golang.org/x/sys/unix"
)

// The fast path of an RD QP (docs/fastpath.md "RD", the page's RD halves:
// proto/fastpath_rd.go). The hand-over of the socket is the UD QP's
// (rnic/fastpath.go); on top of it the engine moves the steady state of
// its proven peers to the rank when it gives the socket back
// (FastpathExport into the page's slots, fpEnd) and takes it back, checked
// (fastpath_import.go), when it owns the socket again (fpBegin). While the
// rank owns the socket the engine does not read it, does not run the QP's
// RD timers and does not send DATA: its only work is to look at the page —
// the lease, the rank's release, posted work (which needs the socket: a
// take-over) and the oldest datagram the rank left outstanding, whose
// retransmission timeout is also a take-over, after which llp/rd
// retransmits the rank's copy as it retransmits its own.

// tokRank names a copy of a datagram the rank sent itself (rd/state.go
// token kinds); its sequence part is the QP's count of such copies.
const tokRank = 3

// fpState is what an RD QP's engine keeps of its fast path.
type fpState struct {
	exp       [proto.FPRDSlots]fpExported // what each slot was given at the hand-back
	nExp      int                         // slots in use (0..FPRDSlots)
	peers     []rd.FPPeer                 // FastpathExport's scratch
	copies    map[rd.Token]fpHeld         // the rank's outstanding datagrams, taken back (build)
	next      uint64                      // the next copy's token sequence
	keep      func(rd.Token) bool         // fpKeep bound to the QP (rd/fastpath_out.go)
	reqs      []fpReq                     // the rank's Reads and atomics outstanding at the take-over (rd/fastpath_req.go)
	expReqMSN uint32                      // the MSN of QN 1 exported at the hand-back
}

// fpHeld is a datagram the rank left outstanding, taken back at a take-over.
type fpHeld struct {
	peer netip.AddrPort
	body []byte // DDP header onwards, as the rank sent it
}

// fpBegin follows q's page at the start of its service (rnic
// FastpathBeginForce) and reports whether the engine serves q's socket
// and peers in this service. When it has just taken the socket back it
// imports the rank's halves (a violation fails q).
func (e *Engine) fpBegin(q *QP, now time.Time) bool {
	c := q.QP.QP
	if c.FP == nil {
		return true
	}
	read, started := e.FastpathBeginForce(c, now, q.fpNeeded(now))
	if !started {
		return read
	}
	if c.FP.GRO() && e.Cfg.GRO {
		// The rank turned UDP_GRO off while it served the socket: a
		// buffer the kernel coalesced before would reach the engine
		// without its control message and be judged as one datagram
		// (a bad CRC; with CRC off, wrong octets). The engine reads with
		// it on, always; the rank sets it again at its next hand-back
		// (c/core fpown.c iwvi_fp_own_set_gro, docs/fastpath.md).
		unix.SetsockoptInt(q.FD, unix.SOL_UDP, unix.UDP_GRO, 1)
	}
	if !c.FastpathOff() {
		e.fpImport(q, now)
	}
	q.Rd.fp.nExp = 0
	q.Readable = true
	e.SetOwnInterest(q.QP)
	return read
}

// fpNeeded reports whether the engine needs the socket back from a rank
// that owns it: work posted to the SQ, or the oldest datagram the rank
// left outstanding at its retransmission timeout.
func (q *QP) fpNeeded(now time.Time) bool {
	if !q.FastpathRank() {
		return false
	}
	if n, err := q.SQ.Available(); err != nil || n > 0 {
		return true
	}
	d, ok := q.fpRTO()
	return ok && !d.After(now)
}

// fpRTO is the earliest retransmission timeout of the datagrams the rank
// left outstanding, read from the page (the client's: a ring index out of
// bounds is due now, and fails the QP at the import).
func (q *QP) fpRTO() (time.Time, bool) {
	fp := &q.Rd.fp
	if fp.nExp == 0 {
		return time.Time{}, false
	}
	mem := q.QP.QP.FP.Mem()
	var first time.Time
	found := false
	for i := range fp.nExp {
		s := mem[proto.FPRDSlotOff(i):]
		n := (*atomic.Uint32)(unsafe.Pointer(&s[proto.OffFPRDOutN])).Load()
		if n == 0 {
			continue
		}
		head := (*atomic.Uint32)(unsafe.Pointer(&s[proto.OffFPRDOutHead])).Load()
		if head >= proto.FPRDRing || n > proto.FPRDRing {
			return time.Time{}, true // garbage: now
		}
		at := (*atomic.Int64)(unsafe.Pointer(&s[proto.OffFPRDRing+int(head)*proto.FPRDEntryLen+proto.OffFPRDEntrySentAt])).Load()
		at = min(max(at, fp.exp[i].at), rnic.MonoNS(time.Now()))
		d := rnic.MonoTime(at).Add(fp.exp[i].st.RTO)
		if !found || d.Before(first) {
			first, found = d, true
		}
	}
	return first, found
}

// fpImport takes the halves of every exported slot back into llp/rd,
// checked (fastpath_import.go); the first violation fails q.
func (e *Engine) fpImport(q *QP, now time.Time) {
	c := q.QP.QP
	r := q.Rd
	fp := &r.fp
	mem := c.FP.Mem()
	n := rnic.MonoNS(now)
	for i := range fp.nExp {
		st, outs, err := fpImportSlot(mem, i, &fp.exp[i], n)
		if err != nil {
			e.FastpathFail(c, err.Error())
			return
		}
		toks := make([]rd.FPOut, len(outs))
		for k, o := range outs {
			tok := makeToken(tokRank, fp.next, 0)
			fp.next++
			toks[k] = rd.FPOut{Tok: tok, SentAt: rnic.MonoTime(o.sentAt)}
			if fp.copies == nil {
				fp.copies = map[rd.Token]fpHeld{}
			}
			fp.copies[tok] = fpHeld{peer: fp.exp[i].st.Addr, body: o.body}
		}
		if err := r.ep.FastpathImport(now, st, toks); err != nil {
			e.FastpathFail(c, err.Error())
			return
		}
		r.count(fpTaken, int64(len(toks)))
	}
	if err := e.fpImportReqs(q, mem); err != nil { // rd/fastpath_req.go
		e.FastpathFail(c, err.Error())
		return
	}
	for i := range fp.nExp {
		(*atomic.Uint32)(unsafe.Pointer(&mem[proto.FPRDSlotOff(i)+proto.OffFPRDState])).Store(0)
	}
	r.msn[rdmap.QNSend] = binary.LittleEndian.Uint32(mem[proto.OffFPRDSendMSN:])                 // the rank's Sends were numbered on
	r.msn[rdmap.QNAtomicResponse] = binary.LittleEndian.Uint32(mem[proto.OffFPRDAtomicRespMSN:]) // and its Atomic Responses
}

// fpClose takes q's socket and its peers' halves back from the rank when
// q is destroyed while the rank owns it (close, before closeAcks and the
// linger): what the rank took since the last hand-back — its peers'
// RcvNext, the ACKs it owes — is then the linger's (rd/linger.go).
// Without it the linger kept the RcvNext of the last hand-back and did not
// acknowledge a retransmission of a Send the rank had delivered (its own
// ACK of it lost): the sender retried into silence until WCRetryExcErr
// (TestAtomicsNetns/rdm-loss5, a client's fi_send of its last message
// through its daemon, the server's QP destroyed right after). A rank Busy
// at that moment (it should not be: it destroys the QP) keeps its halves.
func (e *Engine) fpClose(q *QP, now time.Time) {
	c := q.QP.QP
	if c.FP == nil || c.FastpathOff() || q.State != proto.QPStateRTS {
		return
	}
	if _, started := e.FastpathBeginForce(c, now, true); !started || c.FastpathOff() {
		return
	}
	e.fpImport(q, now)
	q.Rd.fp.nExp = 0
}

// fpEnd gives q's socket to its rank at the end of a service when the
// rank asked (Want), q is quiet and llp/rd lets its peers go
// (FastpathExport): the slots are written, then the socket is handed back.
func (e *Engine) fpEnd(q *QP, now time.Time) bool {
	c := q.QP.QP
	if !c.FastpathWanted() || !q.fpQuiet() { // rd/fastpath_out.go
		return false
	}
	r := q.Rd
	fp := &r.fp
	inFlight := uint32(min(r.ep.Config().Window, proto.FPRDRing))
	ps, ok := r.ep.FastpathExportOut(now, proto.FPRDSlots, fp.peers[:0], int(inFlight), q.fpKeepFunc())
	if !ok {
		return false
	}
	fp.peers = ps
	mem := c.FP.Mem()
	at := rnic.MonoNS(now)
	maxBody := min(proto.FPRDCopyLen, r.dgramSize-dgram.KeyHeaderLen-dgram.RDHeaderLen-4)
	for i := range proto.FPRDSlots {
		if i >= len(ps) {
			clear(mem[proto.FPRDSlotOff(i) : proto.FPRDSlotOff(i)+proto.FPRDSlotLen])
			continue
		}
		fp.exp[i] = fpExported{st: ps[i], qkey: r.peerKey(ps[i].Addr), inFlight: inFlight, maxBody: maxBody, at: at}
		fpExportSlot(mem, i, &fp.exp[i])
		if len(ps[i].Out) > 0 {
			e.fpExportOut(q, mem, i, &ps[i]) // rd/fastpath_out.go
		}
	}
	fp.nExp = len(ps)
	binary.LittleEndian.PutUint32(mem[proto.OffFPRDSendMSN:], r.msn[rdmap.QNSend])
	binary.LittleEndian.PutUint32(mem[proto.OffFPRDAtomicRespMSN:], r.msn[rdmap.QNAtomicResponse])
	q.fpExportReqIDs(mem) // rd/fastpath_req.go
	if !e.FastpathEnd(c, now, true) {
		e.fpImport(q, now) // what was exported (owed ACKs, outstanding datagrams) comes back
		fp.nExp = 0
		return false
	}
	q.Readable = false
	e.SetOwnInterest(q.QP)
	return true
}

// fpHasWork is hasWork while q has a fast path: ok false leaves the answer
// to hasWork. While the rank owns the socket only its release or posted
// work (a take-over) is work, never while a take-over waits for Busy
// (FastpathDeadline wakes it); while the engine owns it the rank's Want
// is work once q is quiet and its peers may go.
func (q *QP) fpHasWork() (work, ok bool) {
	c := q.QP.QP
	switch {
	case c.FP == nil || c.FastpathOff() || q.State != proto.QPStateRTS:
		return false, false
	case c.FastpathRank():
		if c.FastpathReleased() {
			return true, true
		}
		n, err := q.SQ.Available()
		return err != nil || n > 0, true
	case !q.DaemonReads():
		return false, true // taking: FastpathDeadline
	case c.FastpathWanted() && q.fpQuiet() &&
		q.Rd.ep.FastpathReadyOut(proto.FPRDSlots, min(q.Rd.ep.Config().Window, proto.FPRDRing), q.fpKeepFunc()):
		return true, true
	}
	return false, false
}

// fpDeadline is q's RD deadline while its rank owns the socket: the
// oldest outstanding datagram's retransmission timeout (the lease's end
// is the datagram QP's, rnic FastpathDeadline); llp/rd's own timers stop
// meanwhile (its exported peers are the rank's).
func (q *QP) fpDeadline() (time.Time, bool) {
	if q.FastpathRank() {
		return q.fpRTO()
	}
	return time.Time{}, false
}

// fpResolve forgets the copy tok of a datagram the rank sent: ok, it was
// acknowledged; otherwise it was given up (retries exceeded, or the peer
// restarted) after the rank completed its send, and the QP fails, as a
// work request's retry-exceeded error fails it.
func (e *Engine) fpResolve(q *QP, tok rd.Token, ok bool) {
	fp := &q.Rd.fp
	if _, had := fp.copies[tok]; !had {
		return
	}
	delete(fp.copies, tok)
	if !ok {
		r := q.Rd
		r.count(retryExceeded, 1)
		e.errorQP(q, "a datagram its rank sent itself (fast path) was not acknowledged: retries exceeded or the peer restarted (docs/fastpath.md)")
	}
}

// fpBuild appends the retransmission of the rank's copy tok with RD header h.
func (e *Engine) fpBuild(b *batch, peer netip.AddrPort, tok rd.Token, h *dgram.RDHeader) bool {
	r := b.q.Rd
	c, ok := r.fp.copies[tok]
	if !ok {
		return true // resolved meanwhile
	}
	if !b.add(peer, h, nil, nil, append(e.Pieces[:0], c.body)) {
		return false
	}
	r.count(fpResent, 1)
	return true
}

// fpWriteRefused reports whether an error message from src naming the
// tagged DDP header oh refuses a Write-Record the rank sent itself and
// left outstanding (docs/fastpath.md "RDMA Writes the rank sends
// itself"): its copy, to src, with that STag and a range holding oh.TO.
// The target holds back the acknowledgement of a refused datagram until
// its error message is through, so that copy is still held. The rank has
// no work request here to complete with the error, and would complete the
// Write when it is acknowledged: the caller fails the QP instead, which
// fails the rank's pending Writes (the provider, iwd_fastpath_rma.c).
func (q *QP) fpWriteRefused(src netip.AddrPort, oh *ddp.Header) bool {
	for _, c := range q.Rd.fp.copies {
		if c.peer != src {
			continue
		}
		h, hl, err := ddp.Parse(c.body)
		if err != nil || !h.Tagged || !rdmap.Control(h.ULPControl).Opcode().IsWriteRecord() || h.Stag != oh.Stag {
			continue
		}
		rec, _, err := rdmap.ParseWriteRecord(c.body[hl:])
		if err != nil || oh.TO < h.TO || oh.TO-h.TO > uint64(rec.MessageLength) {
			continue
		}
		return true
	}
	return false
}
