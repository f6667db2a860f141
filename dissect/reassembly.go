package dissect

// reassembler orders one direction of a TCP connection by sequence number
// and hands the in-order bytes on. It drops retransmitted overlap, keeps
// out-of-order segments (copied) up to a byte limit, and reports a gap when
// that limit is exceeded or the capture ends with a hole; after a gap it
// resumes at the lowest buffered segment. Sequence numbers compare with
// 32-bit serial arithmetic.
type reassembler struct {
	started      bool
	next         uint32 // next expected sequence number
	pending      []pendingSegment
	pendingBytes int
	max          int // bound on pendingBytes

	onData func(data []byte, frame int)
	onGap  func(missing uint32, frame int)
}

type pendingSegment struct {
	seq   uint32
	data  []byte
	frame int
}

// DefaultMaxBuffered bounds the out-of-order bytes kept per direction.
const DefaultMaxBuffered = 4 << 20

// syn records the initial sequence number from a SYN: data starts at isn+1.
func (r *reassembler) syn(isn uint32) {
	if !r.started {
		r.started, r.next = true, isn+1
	}
}

// segment accepts one TCP segment's payload.
func (r *reassembler) segment(seq uint32, data []byte, frame int) {
	if len(data) == 0 {
		return
	}
	if !r.started {
		r.started, r.next = true, seq
	}
	if d := int32(seq - r.next); d > 0 {
		r.insert(seq, data, frame)
		for r.max > 0 && r.pendingBytes > r.max && len(r.pending) > 0 {
			r.skipToPending(frame)
		}
		return
	}
	r.deliver(seq, data, frame)
	r.drain()
}

// deliver passes the part of data at or after r.next (data starts at or
// before r.next).
func (r *reassembler) deliver(seq uint32, data []byte, frame int) {
	skip := r.next - seq
	if uint64(skip) >= uint64(len(data)) {
		return // retransmission of data already delivered
	}
	data = data[skip:]
	r.next += uint32(len(data))
	r.onData(data, frame)
}

func (r *reassembler) drain() {
	for len(r.pending) > 0 && int32(r.pending[0].seq-r.next) <= 0 {
		p := r.pending[0]
		r.pending = r.pending[1:]
		r.pendingBytes -= len(p.data)
		r.deliver(p.seq, p.data, p.frame)
	}
	if len(r.pending) == 0 {
		r.pending = nil
	}
}

func (r *reassembler) insert(seq uint32, data []byte, frame int) {
	i := 0
	for i < len(r.pending) && int32(r.pending[i].seq-seq) < 0 {
		i++
	}
	if i < len(r.pending) && r.pending[i].seq == seq {
		if len(r.pending[i].data) >= len(data) {
			return // duplicate of a buffered segment
		}
		r.pendingBytes -= len(r.pending[i].data)
		r.pending[i] = pendingSegment{seq, append([]byte(nil), data...), frame}
		r.pendingBytes += len(data)
		return
	}
	r.pending = append(r.pending, pendingSegment{})
	copy(r.pending[i+1:], r.pending[i:])
	r.pending[i] = pendingSegment{seq, append([]byte(nil), data...), frame}
	r.pendingBytes += len(data)
}

// skipToPending declares the hole before the first buffered segment lost.
func (r *reassembler) skipToPending(frame int) {
	missing := r.pending[0].seq - r.next
	r.next = r.pending[0].seq
	r.onGap(missing, frame)
	r.drain()
}

// flush delivers everything still buffered at the end of the capture,
// reporting each hole.
func (r *reassembler) flush(frame int) {
	for len(r.pending) > 0 {
		r.skipToPending(frame)
	}
}
