package ud

import (
	"github.com/iwarpd/iwarpd/verbsd/rnic"
	"net/netip"
	"time"
)

// Best-effort reassembly of UD messages larger than one datagram: segments
// are grouped by (source address, MSN) — the MSN is per sending QP — and
// copied to their MO in a buffer; a message is complete when its last
// segment has arrived and every octet before it. A partial message expires
// after Config.ReassemblyTimeout; at most Config.MaxPartial are kept per QP
// (the oldest is evicted for a new one). A segment that repeats octets
// already received is ignored; one that overlaps them only in part, or lies
// past the end the last segment set, spoils its message. The reassembler
// takes deadlines from its caller and has no clock.
//
// The hot path does not allocate: the partials (and their buffers, which
// grow to the largest message seen, up to the caller's maximum) are
// recycled, the received octets are kept as a short sorted list of ranges
// (one range when segments arrive in order), and partials are found by a
// linear scan (there are at most MaxPartial).

type PartialKey struct {
	src netip.AddrPort
	msn uint32
}

// Span is a range [start, end) of received octets.
type Span struct{ Start, End uint32 }

type Partial struct {
	key       PartialKey
	Buf       []byte
	spans     []Span // received ranges, sorted, disjoint, not adjacent
	got       int    // octets received
	total     int    // message length, -1 until the last segment
	solicited bool
	deadline  time.Time
}

type Reassembler struct {
	live []*Partial
	free []*Partial
}

type AddResult int

const (
	AddOK AddResult = iota
	AddEvicted
	AddBad
)

// maxSegmentsPerMessage bounds the bookkeeping of one partial message.
const maxSegmentsPerMessage = 1 << 16

// maxFreePartials bounds the recycled partials (and buffers) kept per QP.
const maxFreePartials = 2

// Add records n payload octets found at offset off of pieces as the segment
// at mo of message key. It returns the message when it is complete (the
// caller hands it back with release).
func (r *Reassembler) Add(key PartialKey, mo uint32, last bool, pieces [][]byte, off, n int, solicited bool,
	deadline time.Time, maxPartial, maxMsg int) (*Partial, AddResult) {
	res := AddOK
	i := r.find(key)
	if i < 0 {
		if len(r.live) >= maxPartial && len(r.live) > 0 {
			oldest := 0
			for j, x := range r.live {
				if x.deadline.Before(r.live[oldest].deadline) {
					oldest = j
				}
			}
			r.drop(oldest)
			res = AddEvicted
		}
		p := r.get()
		p.key, p.total, p.deadline = key, -1, deadline
		r.live = append(r.live, p)
		i = len(r.live) - 1
	}
	p := r.live[i]
	end := uint64(mo) + uint64(n)
	if end > uint64(maxMsg) {
		r.drop(i)
		return nil, AddBad
	}
	if p.covers(mo, uint32(end), last) {
		return nil, res // a duplicate
	}
	if (p.total >= 0 && (int(end) > p.total || last)) || len(p.spans) >= maxSegmentsPerMessage || !p.insert(mo, uint32(end)) {
		r.drop(i)
		return nil, AddBad
	}
	if last {
		if len(p.Buf) > int(end) {
			r.drop(i)
			return nil, AddBad
		}
		p.total = int(end)
		p.solicited = solicited
	}
	if len(p.Buf) < int(end) {
		if cap(p.Buf) < int(end) {
			nb := make([]byte, end, min(max(int(end), 2*cap(p.Buf)), maxMsg))
			copy(nb, p.Buf)
			p.Buf = nb
		} else {
			p.Buf = p.Buf[:end]
		}
	}
	rnic.CopyRange(p.Buf[mo:end], pieces, off)
	p.got += n
	if p.total >= 0 && p.got == p.total {
		r.live[i] = r.live[len(r.live)-1]
		r.live = r.live[:len(r.live)-1]
		return p, res
	}
	return nil, res
}

// covers reports whether [start, end) was received already (for an empty
// last segment: whether the end is known and is start).
func (p *Partial) covers(start, end uint32, last bool) bool {
	if start == end {
		return last && p.total == int(start)
	}
	for _, s := range p.spans {
		if s.Start <= start && end <= s.End {
			return true
		}
	}
	return false
}

// insert adds [start, end) to the received ranges, merging neighbours; it
// reports false when the range overlaps one received (in part).
func (p *Partial) insert(start, end uint32) bool {
	if start == end {
		return true
	}
	j := len(p.spans)
	for j > 0 && p.spans[j-1].Start >= end { // spans after the new one
		j--
	}
	if j > 0 && p.spans[j-1].End > start {
		return false
	}
	if j < len(p.spans) && p.spans[j].Start < end {
		return false
	}
	joinPrev := j > 0 && p.spans[j-1].End == start
	joinNext := j < len(p.spans) && p.spans[j].Start == end
	switch {
	case joinPrev && joinNext:
		p.spans[j-1].End = p.spans[j].End
		p.spans = append(p.spans[:j], p.spans[j+1:]...)
	case joinPrev:
		p.spans[j-1].End = end
	case joinNext:
		p.spans[j].Start = start
	default:
		p.spans = append(p.spans, Span{})
		copy(p.spans[j+1:], p.spans[j:])
		p.spans[j] = Span{start, end}
	}
	return true
}

func (r *Reassembler) find(key PartialKey) int {
	for i, p := range r.live {
		if p.key == key {
			return i
		}
	}
	return -1
}

// get returns a recycled partial (or a new one).
func (r *Reassembler) get() *Partial {
	if n := len(r.free); n > 0 {
		p := r.free[n-1]
		r.free = r.free[:n-1]
		return p
	}
	return &Partial{}
}

// drop forgets live partial i.
func (r *Reassembler) drop(i int) {
	p := r.live[i]
	r.live[i] = r.live[len(r.live)-1]
	r.live = r.live[:len(r.live)-1]
	r.Release(p)
}

// Release recycles a partial (a completed message once delivered, or a
// dropped one).
func (r *Reassembler) Release(p *Partial) {
	p.Buf, p.spans, p.got, p.total, p.solicited = p.Buf[:0], p.spans[:0], 0, -1, false
	if len(r.free) < maxFreePartials {
		r.free = append(r.free, p)
	}
}

// Expire drops partial messages whose deadline is before now and returns
// how many.
func (r *Reassembler) Expire(now time.Time) int {
	n := 0
	for i := 0; i < len(r.live); {
		if r.live[i].deadline.Before(now) {
			r.drop(i)
			n++
			continue
		}
		i++
	}
	return n
}

// NextDeadline returns the earliest deadline of a partial message.
func (r *Reassembler) NextDeadline() (time.Time, bool) {
	var d time.Time
	ok := false
	for _, p := range r.live {
		if !ok || p.deadline.Before(d) {
			d, ok = p.deadline, true
		}
	}
	return d, ok
}

// reset forgets everything (the QP was reset or closed).
func (r *Reassembler) reset() { r.live, r.free = nil, nil }

// Partials returns how many messages are partly reassembled.
func (r *Reassembler) Partials() int { return len(r.live) }
