package verbsd

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
// one), maxWrecRanges ranges per record, maxWrecTombs tombstones.

type wrecKey struct {
	src  netip.AddrPort
	stag uint32
	id   uint32
}

type wrecRecord struct {
	key      wrecKey
	base     uint64 // TO of the message's first octet
	length   uint32 // MessageLength
	spans    []span // placed ranges, offsets from base
	got      uint64 // octets placed
	deadline time.Time
	hasImm   bool   // a Write-Record with Immediate (opcode 0xD)
	imm      uint32 // its immediate value
}

type wrecTomb struct {
	key   wrecKey
	until time.Time
}

type wrecTable struct {
	live    []*wrecRecord
	tombs   []wrecTomb // ring of maxWrecTombs
	tombAt  int
	termMSN uint32      // MSN of the last error message the QP sent (QN 2)
	scratch []byte      // the record written into a receive buffer
	recv    rnic.RecvWR // the receive a record completes outside a receive batch
}

const (
	maxWrecRanges = 1 << 12 // ranges kept per record (more: the record is dropped)
	maxWrecTombs  = 256
)

func (t *wrecTable) find(k wrecKey) int {
	for i, r := range t.live {
		if r.key == k {
			return i
		}
	}
	return -1
}

// dead reports whether k completed or failed recently.
func (t *wrecTable) dead(k wrecKey, now time.Time) bool {
	for _, x := range t.tombs {
		if x.key == k && now.Before(x.until) {
			return true
		}
	}
	return false
}

// bury remembers k until until.
func (t *wrecTable) bury(k wrecKey, until time.Time) {
	if len(t.tombs) < maxWrecTombs {
		t.tombs = append(t.tombs, wrecTomb{k, until})
		return
	}
	t.tombs[t.tombAt] = wrecTomb{k, until}
	t.tombAt = (t.tombAt + 1) % maxWrecTombs
}

// remove takes live record i out (order is not kept).
func (t *wrecTable) remove(i int) *wrecRecord {
	r := t.live[i]
	t.live[i] = t.live[len(t.live)-1]
	t.live = t.live[:len(t.live)-1]
	return r
}

// oldest returns the index of the live record with the earliest deadline.
func (t *wrecTable) oldest() int {
	o := 0
	for i, r := range t.live {
		if r.deadline.Before(t.live[o].deadline) {
			o = i
		}
	}
	return o
}

// nextDeadline returns the earliest deadline of a live record.
func (t *wrecTable) nextDeadline() (time.Time, bool) {
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
func (t *wrecTable) reset() { t.live, t.tombs, t.tombAt = nil, nil, 0 }

// place records [start, end) as placed and returns how many of its octets
// were new; ok is false when the record would need more than maxWrecRanges
// ranges. Overlaps with placed ranges are allowed (a duplicated segment
// rewrote the same octets).
func (r *wrecRecord) place(start, end uint32) (added uint64, ok bool) {
	if start >= end {
		return 0, true
	}
	// First range that ends at or after start; last that starts at or
	// before end: those merge with [start, end).
	i := 0
	for i < len(r.spans) && r.spans[i].end < start {
		i++
	}
	j := i
	covered := uint64(0)
	ns, ne := start, end
	for j < len(r.spans) && r.spans[j].start <= end {
		s := r.spans[j]
		lo, hi := max(s.start, start), min(s.end, end)
		if hi > lo {
			covered += uint64(hi - lo)
		}
		ns, ne = min(ns, s.start), max(ne, s.end)
		j++
	}
	if i == j { // insert
		if len(r.spans) >= maxWrecRanges {
			return 0, false
		}
		r.spans = append(r.spans, span{})
		copy(r.spans[i+1:], r.spans[i:])
		r.spans[i] = span{ns, ne}
	} else {
		r.spans[i] = span{ns, ne}
		r.spans = append(r.spans[:i+1], r.spans[j:]...)
	}
	added = uint64(end-start) - covered
	r.got += added
	return added, true
}
