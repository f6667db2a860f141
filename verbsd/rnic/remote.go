package rnic

import (
	"math"

	"github.com/iwarpd/iwarpd/proto"
	"github.com/iwarpd/iwarpd/rdmap"
)

// Remote access to a QP's registered memory (RFC 5040 §6.4: STag, PD,
// access rights, tagged offset range), for RDMA Writes, Read Requests and
// Read Responses of RC and RD, and atomics.

// LookupRemote resolves a remote access to q's registered memory: STag (the
// MR's rkey, valid, in q's session), PD, access right need, TO range.
func (q *QP) LookupRemote(stag uint32, to, n uint64, need proto.Access) ([]byte, rdmap.AccessFault) {
	m, off, f := q.checkRemote(stag, to, n, need, false) // a Read's source is read right away: no probe first
	if f != 0 {
		return nil, f
	}
	if m.Proc != nil { // rnic/stage.go: a Read's source is read now; a Write's target is written back on commit
		b, st := q.Eng.stage(q.Session, m.Proc, off, n, need == proto.AccessRemoteRead)
		if st != proto.WCSuccess {
			return nil, rdmap.FaultBaseBounds
		}
		return b, 0
	}
	return m.Mem[off : off+n : off+n], 0
}

// ReadRemote copies the octets [to, to+len(dst)) of the region stag names
// into dst, with LookupRemote's checks for a remote read: for a transport
// that keeps a source's octets beyond one engine pass (an RD Read
// Response reading its source in process memory ahead, one access of the
// copier for many datagrams). A process region is read into dst itself
// (pread of /proc/PID/mem on the session's copier, rnic/copier.go); after
// a fault the caller must not reuse dst, which a stalled copier may still
// write. Mapped memory is copied.
func (q *QP) ReadRemote(dst []byte, stag uint32, to uint64) rdmap.AccessFault {
	n := uint64(len(dst))
	m, off, f := q.checkRemote(stag, to, n, proto.AccessRemoteRead, false)
	if f != 0 {
		return f
	}
	if m.Proc == nil {
		copy(dst, m.Mem[off:off+n])
		return 0
	}
	if n == 0 {
		return 0
	}
	if m.Proc.ReadAt(dst, off) != nil {
		q.Eng.Count(nil, cProcessMemFaults, 1)
		return rdmap.FaultBaseBounds
	}
	q.Eng.Count(nil, cProcessMemRead, int64(n))
	return 0
}

// CheckRemote is LookupRemote's checks alone: the region and the offset of to in
// it, for a request whose octets are used later (a Read Request: its
// Response translates a window at a time, txPayloads). A source in
// process memory is probed (its first and last octets readable), not read.
func (q *QP) CheckRemote(stag uint32, to, n uint64, need proto.Access) (*MR, uint64, rdmap.AccessFault) {
	return q.checkRemote(stag, to, n, need, true)
}

func (q *QP) checkRemote(stag uint32, to, n uint64, need proto.Access, probe bool) (*MR, uint64, rdmap.AccessFault) {
	m := q.Session.MRByRKey(stag)
	switch {
	case m == nil || m.Invalid.Load():
		return nil, 0, rdmap.FaultInvalidStag
	case m.PD != q.PD:
		return nil, 0, rdmap.FaultPDMismatch
	case m.Access&need == 0:
		return nil, 0, rdmap.FaultAccessRights
	case n > 0 && n-1 > math.MaxUint64-to:
		return nil, 0, rdmap.FaultTOWrap
	case to < m.Addr || to-m.Addr > m.Size() || n > m.Size()-(to-m.Addr):
		return nil, 0, rdmap.FaultBaseBounds
	}
	off := to - m.Addr
	if probe && m.Proc != nil && need == proto.AccessRemoteRead && m.Proc.probe(off, n) != nil {
		return nil, 0, rdmap.FaultBaseBounds
	}
	return m, off, 0
}
