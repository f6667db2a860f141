package verbsd

import (
	"net/netip"
	"time"
)

// Best-effort reassembly of UD messages larger than one datagram: segments
// are grouped by (source address, MSN) — the MSN is per sending QP — and
// copied to their MO in a buffer; a message is complete when its last
// segment has arrived and every octet before it. A partial message expires
// after Config.ReassemblyTimeout; at most Config.MaxPartial are kept per QP
// (the oldest is evicted for a new one). Duplicates are ignored. The
// reassembler takes deadlines from its caller and has no clock.

type partialKey struct {
	src netip.AddrPort
	msn uint32
}

type partial struct {
	key       partialKey
	buf       []byte
	seen      map[uint32]struct{} // MOs received
	got       int                 // octets received
	total     int                 // message length, -1 until the last segment
	solicited bool
	deadline  time.Time
}

type reassembler struct {
	m map[partialKey]*partial
}

type addResult int

const (
	addOK addResult = iota
	addEvicted
	addBad
)

// maxSegmentsPerMessage bounds the bookkeeping of one partial message.
const maxSegmentsPerMessage = 1 << 16

// add records n payload octets found at offset off of pieces as the segment
// at mo of message key. It returns the message when it is complete (the
// caller hands it back with release).
func (r *reassembler) add(key partialKey, mo uint32, last bool, pieces [][]byte, off, n int, solicited bool,
	deadline time.Time, maxPartial, maxMsg int) (*partial, addResult) {
	res := addOK
	if r.m == nil {
		r.m = map[partialKey]*partial{}
	}
	p := r.m[key]
	if p == nil {
		if len(r.m) >= maxPartial {
			var oldest *partial
			for _, x := range r.m {
				if oldest == nil || x.deadline.Before(oldest.deadline) {
					oldest = x
				}
			}
			delete(r.m, oldest.key)
			res = addEvicted
		}
		p = &partial{key: key, seen: map[uint32]struct{}{}, total: -1, deadline: deadline}
		r.m[key] = p
	}
	if _, dup := p.seen[mo]; dup {
		return nil, res
	}
	end := int(mo) + n
	if (p.total >= 0 && (end > p.total || last)) || len(p.seen) >= maxSegmentsPerMessage || end > maxMsg {
		delete(r.m, key)
		return nil, addBad
	}
	if last {
		if len(p.buf) > end {
			delete(r.m, key)
			return nil, addBad
		}
		p.total = end
		p.solicited = solicited
	}
	if len(p.buf) < end {
		if cap(p.buf) < end {
			nb := make([]byte, end, min(max(end, 2*cap(p.buf)), maxMsg))
			copy(nb, p.buf)
			p.buf = nb
		} else {
			p.buf = p.buf[:end]
		}
	}
	copyRange(p.buf[mo:end], pieces, off)
	p.seen[mo] = struct{}{}
	p.got += n
	if p.total >= 0 && p.got >= p.total {
		delete(r.m, key)
		if p.got != p.total {
			return nil, addBad
		}
		return p, res
	}
	return nil, res
}

// release forgets a completed message.
func (r *reassembler) release(p *partial) { p.buf, p.seen = nil, nil }

// expire drops partial messages whose deadline is before now and returns
// how many.
func (r *reassembler) expire(now time.Time) int {
	n := 0
	for k, p := range r.m {
		if p.deadline.Before(now) {
			delete(r.m, k)
			n++
		}
	}
	return n
}

// nextDeadline returns the earliest deadline of a partial message.
func (r *reassembler) nextDeadline() (time.Time, bool) {
	var d time.Time
	ok := false
	for _, p := range r.m {
		if !ok || p.deadline.Before(d) {
			d, ok = p.deadline, true
		}
	}
	return d, ok
}

func (r *reassembler) reset() { r.m = nil }

// partials returns how many messages are partly reassembled.
func (r *reassembler) partials() int { return len(r.m) }
