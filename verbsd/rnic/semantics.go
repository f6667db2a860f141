package rnic

import (
	"sync/atomic"
	"unsafe"

	"github.com/iwarpd/iwarpd/iwerr"
	"github.com/iwarpd/iwarpd/proto"
	"github.com/iwarpd/iwarpd/rdmap"
)

// RDMA verbs semantics every transport shares: atomics (RFC 7306), the
// completion opcodes and statuses of work requests, Terminate codes in
// completions.

// AtomicLen is the size of an atomic's target and result (RFC 7306 §3).
const AtomicLen = 8

// AtomicRequest reads an atomic SQE's operands and result SGE (checked:
// 8 octets, local write) and returns the unmasked RFC 7306 request (ReqID
// left to the caller) and the SGE.
func AtomicRequest(q *QP, sqe *proto.SQE, slot []byte, inline bool) (rdmap.AtomicRequest, proto.SGE, proto.WCStatus) {
	if inline || sqe.NumSGE != 1 || len(slot) < proto.SQEHeaderLen+proto.AtomicOperandsLen+proto.SGELen {
		return rdmap.AtomicRequest{}, proto.SGE{}, proto.WCLocQPOpErr
	}
	var body [proto.AtomicOperandsLen + proto.SGELen]byte
	copy(body[:], slot[proto.SQEHeaderLen:])
	ops := proto.GetAtomicOperands(body[:])
	sge := proto.GetSGE(body[proto.AtomicOperandsLen:])
	if sge.Length != AtomicLen {
		return rdmap.AtomicRequest{}, sge, proto.WCLocLenErr
	}
	if _, st := q.Translate(sge, q.PD, true); st != proto.WCSuccess {
		return rdmap.AtomicRequest{}, sge, st
	}
	r := rdmap.AtomicRequest{Stag: sqe.RKey, TO: sqe.RemoteAddr}
	if sqe.Opcode == proto.WRFetchAdd {
		r.Op, r.AddSwap = rdmap.AtomicFetchAdd, ops.CompareAdd
	} else {
		r.Op, r.Compare, r.AddSwap = rdmap.AtomicCmpSwap, ops.CompareAdd, ops.Swap
		r.CompareMask, r.AddSwapMask = ^uint64(0), ^uint64(0)
	}
	return r, sge, proto.WCSuccess
}

// AtomicTarget resolves and checks the target of an Atomic Request in q's
// memory: STag, PD, AccessRemoteAtomic, bounds, alignment, operation. The
// returned error is the RFC 5040/7306 Terminate code (zero if none).
func (q *QP) AtomicTarget(r *rdmap.AtomicRequest) ([]byte, iwerr.Error) {
	b, f := q.LookupRemote(r.Stag, r.TO, AtomicLen, proto.AccessRemoteAtomic)
	switch {
	case f != 0:
		return nil, rdmap.RDMAPError(f)
	case r.TO%AtomicLen != 0 || uintptr(unsafe.Pointer(&b[0]))%AtomicLen != 0:
		// Misaligned target: a base/bounds violation (docs/atomics.md).
		return nil, iwerr.RDMAPBaseBounds
	case !r.Op.Valid():
		return nil, iwerr.RDMAPOperationUnspecified
	}
	return b, iwerr.Error{}
}

// AtomicExecute performs r on the 8 aligned octets b (registered shared
// memory) with the CPU's atomic instructions and returns the original
// value: indivisible against any other atomic from any QP or transport
// and against the owning process's atomics on the same word. The value is
// the host's uint64 (what the owning process's CPU atomics see).
func AtomicExecute(b []byte, r *rdmap.AtomicRequest) uint64 {
	p := (*uint64)(unsafe.Pointer(&b[0]))
	if r.Op == rdmap.AtomicFetchAdd && r.AddSwapMask == 0 {
		return atomic.AddUint64(p, r.AddSwap) - r.AddSwap
	}
	for {
		old := atomic.LoadUint64(p)
		v, store := r.Apply(old)
		if !store || atomic.CompareAndSwapUint64(p, old, v) {
			return old
		}
	}
}

// SRQLimitCheck raises the SRQ limit event once the SRQ fell below it.
func (e *Engine) SRQLimitCheck(q *QP) {
	if s := q.SRQ; s != nil && s.Limit > 0 {
		if avail, err := s.Cons.Available(); err == nil && avail < s.Limit {
			s.Limit = 0
			q.Session.SendEvent(e, proto.Event{Type: proto.EventSRQLimit, Handle: s.Handle})
		}
	}
}

// WCOpcodeOf is the completion opcode of a send work request.
func WCOpcodeOf(op proto.SendOpcode) proto.WCOpcode {
	switch op {
	case proto.WRRDMAWrite:
		return proto.WCRDMAWrite
	case proto.WRRDMARead:
		return proto.WCRDMARead
	case proto.WRLocalInvalidate:
		return proto.WCLocalInvalidate
	case proto.WRWriteRecord, proto.WRWriteRecordWithImm:
		return proto.WCWriteRecord
	case proto.WRWriteWithImm:
		return proto.WCRDMAWrite
	case proto.WRFetchAdd:
		return proto.WCFetchAdd
	case proto.WRCmpSwap:
		return proto.WCCmpSwap
	}
	return proto.WCSend
}

// TermWord packs an iWARP error for CQE.Term.
func TermWord(err iwerr.Error) uint32 {
	return uint32(err.Layer)<<16 | uint32(err.Type)<<8 | uint32(err.Code)
}

// TermStatus is the completion status of a work request the peer
// terminated the connection for.
func TermStatus(err iwerr.Error) proto.WCStatus {
	switch {
	case err.Layer == iwerr.LayerRDMAP && err.Type == iwerr.RDMAPRemoteProtection,
		err.Layer == iwerr.LayerDDP && err.Type == iwerr.DDPTaggedBuffer:
		return proto.WCRemAccessErr
	case err.Layer == iwerr.LayerDDP && err.Type == iwerr.DDPUntaggedBuffer:
		return proto.WCRemInvReqErr
	case err.Layer == iwerr.LayerRDMAP && err.Type == iwerr.RDMAPRemoteOperation:
		return proto.WCRemOpErr
	}
	return proto.WCRemAbortErr
}
