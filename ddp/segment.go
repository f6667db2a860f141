package ddp

import (
	"errors"
	"fmt"
	"math"

	"github.com/iwarpd/iwarpd/iwerr"
	"github.com/iwarpd/iwarpd/llp"
)

// Segmentation (RFC 5041 §5.2, headers of §4.2/§4.3).
//
// A DDP message of N payload octets becomes ⌈N/P⌉ segments (one segment when
// N = 0), where P is the largest payload that fits the lower layer's maximum
// segment (MULPDU for MPA, the datagram size for the datagram LLP) after the
// DDP header and any per-segment ULP header. Every segment carries the same
// control octets, STag (tagged) or QN and MSN (untagged); TO (tagged) or MO
// (untagged) advance by the payload already sent; L is set on the last
// segment only.
//
// What counts as "payload" is the ULP's business. RDMAP's Read Request
// (28 octets) and Terminate headers are, from DDP's side, the whole payload of
// an untagged message on QN 1 or QN 2; they are not repeated in every segment.
// RFC 5040 expects those messages to fit in one segment (every LLP's MULPDU is
// far larger than 18+28 octets), so the caller passes msgLen = header length
// and gets one segment. The only header that repeats in every segment is the
// datagram profile's Write-Record header (rdmap.WriteRecordLen): pass its
// length as ulpHeaderLen to MaxPayload so that it is reserved in each segment.

// ErrNoRoom is returned when the maximum segment size leaves no room for
// payload after the headers.
var ErrNoRoom = errors.New("ddp: maximum segment too small for headers")

// MaxPayload returns the largest payload per segment when segments may be at
// most maxSegment octets (DDP header, ulpHeaderLen octets of per-segment ULP
// header, payload). The result is ≤ 0 when nothing fits.
func MaxPayload(maxSegment int, tagged bool, ulpHeaderLen int) int {
	h := UntaggedHeaderLen
	if tagged {
		h = TaggedHeaderLen
	}
	return maxSegment - h - ulpHeaderLen
}

// MaxPayloadFor is MaxPayload with the maximum segment of t.
func MaxPayloadFor(t llp.Transport, tagged bool, ulpHeaderLen int) int {
	return MaxPayload(t.MaxSegment(), tagged, ulpHeaderLen)
}

// Segment is one DDP segment of a message: its header (L, TO or MO already
// set) and the part of the message payload it carries.
type Segment struct {
	Header Header
	Offset uint32 // offset of the payload in the message (MO; TO − first TO)
	Len    int    // payload octets in this segment
}

// Segmenter yields the segments of one DDP message without allocating. Build
// it with TaggedSegments or UntaggedSegments; call Next until it reports
// false, or index segments directly with Segment (e.g. to retransmit one).
type Segmenter struct {
	tmpl   Header // T, DV, ULPControl, Stag+TO or ULPReserved+QN+MSN; L and MO/TO set per segment
	msgLen uint32
	max    uint32 // payload octets per full segment, > 0
	count  uint32 // number of segments, ≥ 1
	next   uint32 // index of the segment Next returns
}

// TaggedSegments returns a Segmenter for a tagged message (RDMA Write, Read
// Response, Write-Record) of msgLen octets placed at stag starting at to,
// with at most maxPayload payload octets per segment. An error wrapping
// iwerr.DDPTOWrap reports a message whose last octet would lie beyond TO
// 2^64−1.
func TaggedSegments(ulpControl uint8, stag uint32, to uint64, msgLen uint32, maxPayload int) (Segmenter, error) {
	if msgLen > 0 && uint64(msgLen)-1 > math.MaxUint64-to {
		return Segmenter{}, fmt.Errorf("ddp: segment: TO 0x%x + %d octets: %w", to, msgLen, iwerr.DDPTOWrap)
	}
	h := Header{Tagged: true, Version: Version, ULPControl: ulpControl, Stag: stag, TO: to}
	return newSegmenter(h, msgLen, maxPayload)
}

// UntaggedSegments returns a Segmenter for an untagged message of msgLen
// octets on queue qn with sequence number msn (see MSNCounter), carrying
// ulpReserved in RsvdULP[8:39] of every segment (RDMAP's Invalidate STag),
// with at most maxPayload payload octets per segment. msgLen is a uint32
// because MO is 32 bits (RFC 5041 §4.3).
func UntaggedSegments(ulpControl uint8, ulpReserved, qn, msn, msgLen uint32, maxPayload int) (Segmenter, error) {
	h := Header{Version: Version, ULPControl: ulpControl, ULPReserved: ulpReserved, QN: qn, MSN: msn}
	return newSegmenter(h, msgLen, maxPayload)
}

func newSegmenter(h Header, msgLen uint32, maxPayload int) (Segmenter, error) {
	if maxPayload <= 0 {
		return Segmenter{}, fmt.Errorf("%w: %d octets of payload per segment", ErrNoRoom, maxPayload)
	}
	m := uint32(min(uint64(maxPayload), math.MaxUint32))
	count := uint32(1)
	if msgLen > 0 {
		count = msgLen / m
		if msgLen%m != 0 {
			count++
		}
	}
	return Segmenter{tmpl: h, msgLen: msgLen, max: m, count: count}, nil
}

// Count returns the number of segments of the message (at least 1).
func (s *Segmenter) Count() uint32 { return s.count }

// MessageLen returns the message length in octets.
func (s *Segmenter) MessageLen() uint32 { return s.msgLen }

// Segment returns segment i (0 ≤ i < Count()). For i out of range it returns
// a zero Segment.
func (s *Segmenter) Segment(i uint32) Segment {
	if i >= s.count {
		return Segment{}
	}
	off := i * s.max // ≤ msgLen, no overflow
	n := min(s.msgLen-off, s.max)
	h := s.tmpl
	h.Last = i == s.count-1
	if h.Tagged {
		h.TO += uint64(off)
	} else {
		h.MO = off
	}
	return Segment{Header: h, Offset: off, Len: int(n)}
}

// Next returns the next segment, or false once all were returned.
func (s *Segmenter) Next() (Segment, bool) {
	if s.next >= s.count {
		return Segment{}, false
	}
	seg := s.Segment(s.next)
	s.next++
	return seg, true
}

// Reset makes Next start again from the first segment.
func (s *Segmenter) Reset() { s.next = 0 }

// QueueCount is the number of untagged queues MSNCounter tracks: RDMAP's
// QN 0 (Send), 1 (Read Request), 2 (Terminate) and RFC 7306's QN 3.
const QueueCount = 4

// ErrQueue is returned by MSNCounter for a queue number it does not track.
var ErrQueue = errors.New("ddp: untagged queue number out of range")

// MSNCounter hands out the Message Sequence Numbers of one DDP stream's
// sending side, one sequence per untagged queue (RFC 5041 §4.3): the first
// message on each queue gets MSN 1, each following one the next value, modulo
// 2^32. The zero value is ready to use. It is not safe for concurrent use.
type MSNCounter struct {
	last [QueueCount]uint32
}

// NextMSN returns the MSN of the next message on queue qn and advances.
func (c *MSNCounter) NextMSN(qn uint32) (uint32, error) {
	if qn >= QueueCount {
		return 0, fmt.Errorf("%w: %d", ErrQueue, qn)
	}
	c.last[qn]++ // wraps modulo 2^32
	return c.last[qn], nil
}

// LastMSN returns the MSN most recently handed out on qn (0 before the first).
func (c *MSNCounter) LastMSN(qn uint32) (uint32, error) {
	if qn >= QueueCount {
		return 0, fmt.Errorf("%w: %d", ErrQueue, qn)
	}
	return c.last[qn], nil
}
