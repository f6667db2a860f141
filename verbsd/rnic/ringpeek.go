package rnic

import (
	"unsafe"

	"github.com/iwarpd/iwarpd/internal/shm"
	"github.com/iwarpd/iwarpd/proto"
)

// RingView lets the engine look at posted entries beyond the head of a
// ring without consuming them (shm.Consumer only shows the head), so that it
// can put several work requests into one sendmmsg/recvmmsg and still
// consume them one by one, in order, as they complete. It locates the
// entries from the ring's geometry and the address of the head slot;
// whenever that does not add up it sees the head only.
type RingView struct {
	entries []byte
	stride  uint32
	mask    uint32
}

// NewRingView describes the entries of a ring laid over mem (its header
// first) with depth entries of stride octets.
func NewRingView(mem []byte, depth, stride uint32) RingView {
	need := proto.RingHeaderLen + int(depth)*int(stride)
	if !proto.ValidDepth(depth) || stride == 0 || len(mem) < need {
		return RingView{}
	}
	return RingView{entries: mem[proto.RingHeaderLen:need:need], stride: stride, mask: depth - 1}
}

// Lookahead returns the entries available to c: the head slot, its index
// in the ring, and how many entries (the head included) can be seen with
// at. n is 0 when nothing is posted; err is the consumer's (a corrupt
// producer index).
func (v *RingView) Lookahead(c *shm.Consumer) (head []byte, idx uint32, n uint32, err error) {
	head, err = c.Peek()
	if err != nil || head == nil {
		return nil, 0, 0, err
	}
	avail, err := c.Available()
	if err != nil || avail == 0 {
		return nil, 0, 0, err
	}
	if len(v.entries) == 0 || len(head) != int(v.stride) {
		return head, 0, 1, nil
	}
	off := uintptr(unsafe.Pointer(&head[0])) - uintptr(unsafe.Pointer(&v.entries[0]))
	if off >= uintptr(len(v.entries)) || off%uintptr(v.stride) != 0 {
		return head, 0, 1, nil
	}
	return head, uint32(off / uintptr(v.stride)), avail, nil
}

// Depth is the number of entries of the ring (1 for a view that could not
// be laid out: one entry at a time).
func (v *RingView) Depth() uint32 { return v.mask + 1 }

// At returns entry k after the head at index idx (k < n of lookahead).
func (v *RingView) At(head []byte, idx, k uint32) []byte {
	if k == 0 {
		return head
	}
	off := ((idx + k) & v.mask) * v.stride
	return v.entries[off : off+v.stride : off+v.stride]
}

// SQView describes q's send queue ring (laid out by createQP: the SQ at
// the start of the region, the RQ after it); RecvView the RQ's or the
// SRQ's.
func (q *QP) SQView() *RingView {
	if !q.views.done {
		q.initViews()
	}
	return &q.views.sq
}

func (q *QP) RecvView() *RingView {
	if !q.views.done {
		q.initViews()
	}
	if q.SRQ != nil {
		return &q.views.srq
	}
	return &q.views.rq
}

func (q *QP) initViews() {
	q.views.done = true
	if q.Region == nil {
		return
	}
	c := q.Caps
	sqStride := proto.SQEStride(c.MaxSendSGE, c.MaxInline)
	q.views.sq = NewRingView(q.Region.Mem, c.MaxSendWR, sqStride)
	if q.RQ != nil {
		sqBytes := proto.RingBytes(c.MaxSendWR, sqStride)
		if sqBytes <= len(q.Region.Mem) {
			q.views.rq = NewRingView(q.Region.Mem[sqBytes:], c.MaxRecvWR, proto.RQEStride(c.MaxRecvSGE))
		}
	}
	if q.SRQ != nil && q.SRQ.Ring != nil {
		r := q.SRQ.Ring
		q.views.srq = NewRingView(r.Bytes(), r.Depth(), r.Stride())
	}
}

// qpViews caches a QP's ring views (engine-owned).
type qpViews struct {
	done        bool
	sq, rq, srq RingView
}
