package ud

import (
	"github.com/iwarpd/iwarpd/verbsd/rnic"
	"net/netip"
	"time"
)

// The Write-Record records a QP is receiving (engine-owned, no clock: the
// caller passes deadlines). A record is keyed by (source address, STag,
// RecordID); it holds the message's base TO and length and the ranges
// placed so far (sorted, disjoint, merged). Once a record completes or
// fails, its key is kept for a while as a tombstone so that a late or
// duplicated segment neither starts a second record (a second completion)
// nor draws a second error message. Everything is bounded: at most
// Config.MaxPartial live records per QP (the oldest is forgotten for a new
// one), MaxWrecRanges ranges per record, MaxWrecTombs tombstones.

type WrecKey struct {
	Src  netip.AddrPort
	Stag uint32
	Id   uint32
}

type WrecRecord struct {
	key      WrecKey
	base     uint64 // TO of the message's first octet
	length   uint32 // MessageLength
	Spans    []Span // placed ranges, offsets from base
	Got      uint64 // octets placed
	deadline time.Time
	hasImm   bool   // a Write-Record with Immediate (opcode 0xD)
	imm      uint32 // its immediate value
}

type wrecTomb struct {
	key   WrecKey
	until time.Time
}

type WrecTable struct {
	live    []*WrecRecord
	Tombs   []wrecTomb // ring of MaxWrecTombs
	tombAt  int
	termMSN uint32      // MSN of the last error message the QP sent (QN 2)
	scratch []byte      // the record written into a receive buffer
	recv    rnic.RecvWR // the receive a record completes outside a receive batch
}

const (
	MaxWrecRanges = 1 << 12 // ranges kept per record (more: the record is dropped)
	MaxWrecTombs  = 256
)

// find returns the index of k's live record, or -1. It looks from the
// newest record back: the segments of a stream of messages are mostly for
// the last record started.
func (t *WrecTable) find(k WrecKey) int {
	for i := len(t.live) - 1; i >= 0; i-- {
		if t.live[i].key == k {
			return i
		}
	}
	return -1
}

// Dead reports whether k completed or failed recently.
func (t *WrecTable) Dead(k WrecKey, now time.Time) bool {
	for _, x := range t.Tombs {
		if x.key == k && now.Before(x.until) {
			return true
		}
	}
	return false
}

// Bury remembers k until until.
func (t *WrecTable) Bury(k WrecKey, until time.Time) {
	if len(t.Tombs) < MaxWrecTombs {
		t.Tombs = append(t.Tombs, wrecTomb{k, until})
		return
	}
	t.Tombs[t.tombAt] = wrecTomb{k, until}
	t.tombAt = (t.tombAt + 1) % MaxWrecTombs
}

// remove takes live record i out (order is not kept).
func (t *WrecTable) remove(i int) *WrecRecord {
	r := t.live[i]
	t.live[i] = t.live[len(t.live)-1]
	t.live = t.live[:len(t.live)-1]
	return r
}

// oldest returns the index of the live record with the earliest deadline.
func (t *WrecTable) oldest() int {
	o := 0
	for i, r := range t.live {
		if r.deadline.Before(t.live[o].deadline) {
			o = i
		}
	}
	return o
}

// nextDeadline returns the earliest deadline of a live record.
func (t *WrecTable) nextDeadline() (time.Time, bool) {
	var d time.Time
	ok := false
	for _, r := range t.live {
		if !ok || r.deadline.Before(d) {
			d, ok = r.deadline, true
		}
	}
	return d, ok
}

// reset forgets everything (the QP was reset or closed).
func (t *WrecTable) reset() { t.live, t.Tombs, t.tombAt = nil, nil, 0 }

// Place records [start, end) as placed and returns how many of its octets
// were new; ok is false when the record would need more than MaxWrecRanges
// ranges. Overlaps with placed ranges are allowed (a duplicated segment
// rewrote the same octets).
func (r *WrecRecord) Place(start, end uint32) (added uint64, ok bool) {
	if start >= end {
		return 0, true
	}
	// First range that ends at or after start; last that starts at or
	// before end: those merge with [start, end).
	i := 0
	for i < len(r.Spans) && r.Spans[i].End < start {
		i++
	}
	j := i
	covered := uint64(0)
	ns, ne := start, end
	for j < len(r.Spans) && r.Spans[j].Start <= end {
		s := r.Spans[j]
		lo, hi := max(s.Start, start), min(s.End, end)
		if hi > lo {
			covered += uint64(hi - lo)
		}
		ns, ne = min(ns, s.Start), max(ne, s.End)
		j++
	}
	if i == j { // insert
		if len(r.Spans) >= MaxWrecRanges {
			return 0, false
		}
		r.Spans = append(r.Spans, Span{})
		copy(r.Spans[i+1:], r.Spans[i:])
		r.Spans[i] = Span{ns, ne}
	} else {
		r.Spans[i] = Span{ns, ne}
		r.Spans = append(r.Spans[:i+1], r.Spans[j:]...)
	}
	added = uint64(end-start) - covered
	r.Got += added
	return added, true
}
