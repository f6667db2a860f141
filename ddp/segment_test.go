package ddp

import (
	"errors"
	"math"
	"testing"

	"github.com/iwarpd/iwarpd/iwerr"
	"github.com/iwarpd/iwarpd/llp"
)

func TestMaxPayload(t *testing.T) {
	cases := []struct {
		max, ulp int
		tagged   bool
		want     int
	}{
		{1460, 0, true, 1446},
		{1460, 0, false, 1442},
		{1460, 12, true, 1434}, // Write-Record header in every segment
		{14, 0, true, 0},
		{10, 0, false, -8},
	}
	for _, c := range cases {
		if got := MaxPayload(c.max, c.tagged, c.ulp); got != c.want {
			t.Errorf("MaxPayload(%d, %v, %d) = %d, want %d", c.max, c.tagged, c.ulp, got, c.want)
		}
	}
	if got := MaxPayloadFor(llp.Fixed(100), false, 0); got != 82 {
		t.Errorf("MaxPayloadFor = %d, want 82", got)
	}
}

// checkAll walks every segment with Next and checks the invariants: each
// segment fits, offsets cover [0,N) once and in order, L only on the last,
// identical STag or QN/MSN, TO/MO = start + offset.
func checkAll(t *testing.T, s Segmenter, tmpl Header, msgLen uint32, maxSegment, ulpLen int) {
	t.Helper()
	var off uint32
	var i uint32
	for {
		seg, ok := s.Next()
		if !ok {
			break
		}
		h := seg.Header
		if h.Len()+ulpLen+seg.Len > maxSegment {
			t.Fatalf("segment %d: %d+%d+%d > %d", i, h.Len(), ulpLen, seg.Len, maxSegment)
		}
		if seg.Offset != off {
			t.Fatalf("segment %d: offset %d, want %d", i, seg.Offset, off)
		}
		if seg.Len == 0 && msgLen != 0 {
			t.Fatalf("segment %d: empty", i)
		}
		last := i == s.Count()-1
		if h.Last != last {
			t.Fatalf("segment %d of %d: L=%v", i, s.Count(), h.Last)
		}
		if h.Tagged != tmpl.Tagged || h.Version != Version || h.ULPControl != tmpl.ULPControl {
			t.Fatalf("segment %d: header %+v", i, h)
		}
		if tmpl.Tagged {
			if h.Stag != tmpl.Stag || h.TO != tmpl.TO+uint64(off) {
				t.Fatalf("segment %d: STag %x TO %x, want %x %x", i, h.Stag, h.TO, tmpl.Stag, tmpl.TO+uint64(off))
			}
		} else if h.QN != tmpl.QN || h.MSN != tmpl.MSN || h.ULPReserved != tmpl.ULPReserved || h.MO != off {
			t.Fatalf("segment %d: QN %d MSN %d MO %d", i, h.QN, h.MSN, h.MO)
		}
		if s.Segment(i) != seg {
			t.Fatalf("Segment(%d) differs from Next", i)
		}
		off += uint32(seg.Len)
		i++
	}
	if off != msgLen || i != s.Count() {
		t.Fatalf("covered %d of %d octets in %d segments (Count %d)", off, msgLen, i, s.Count())
	}
	if _, ok := s.Next(); ok {
		t.Fatal("Next after the end")
	}
}

func TestSegmentsUntagged(t *testing.T) {
	const maxSegment = 100 // 82 payload octets per segment
	for _, n := range []uint32{0, 1, 81, 82, 83, 164, 165, 1000} {
		s, err := UntaggedSegments(0x43, 0, QNsSend, 5, n, MaxPayload(maxSegment, false, 0))
		if err != nil {
			t.Fatal(err)
		}
		wantCount := max(1, (n+81)/82)
		if s.Count() != wantCount {
			t.Fatalf("n=%d: Count %d, want %d", n, s.Count(), wantCount)
		}
		checkAll(t, s, Header{ULPControl: 0x43, QN: QNsSend, MSN: 5}, n, maxSegment, 0)
	}
}

// QNsSend is RDMAP's Send queue number (ddp does not import rdmap).
const QNsSend = 0

func TestSegmentsTagged(t *testing.T) {
	const maxSegment = 64
	const ulp = 12 // a per-segment Write-Record header
	for _, n := range []uint32{0, 1, 37, 38, 39, 500} {
		s, err := TaggedSegments(0x4c, 0x1234, 0x1000, n, MaxPayload(maxSegment, true, ulp))
		if err != nil {
			t.Fatal(err)
		}
		checkAll(t, s, Header{Tagged: true, ULPControl: 0x4c, Stag: 0x1234, TO: 0x1000}, n, maxSegment, ulp)
	}
}

func TestSegmentsZeroLength(t *testing.T) {
	s, err := TaggedSegments(0x40, 1, 0, 0, 1)
	if err != nil {
		t.Fatal(err)
	}
	seg, ok := s.Next()
	want := Header{Tagged: true, Last: true, Version: Version, ULPControl: 0x40, Stag: 1}
	if !ok || seg.Header != want || seg.Len != 0 || seg.Offset != 0 {
		t.Fatalf("zero-length Write RTR segment = %+v, %v", seg, ok)
	}
	// It encodes to the Write RTR of protocol-notes §A.2.
	if got, wantHex := seg.Header.Append(nil), unhex(t, "c140 00000001 0000000000000000"); string(got) != string(wantHex) {
		t.Fatalf("RTR header %x, want %x", got, wantHex)
	}
	if _, ok := s.Next(); ok {
		t.Fatal("second segment for a zero-length message")
	}
}

func TestSegmentsLarge(t *testing.T) {
	const n = 1 << 31
	maxP := MaxPayload(1460, false, 0) // 1442
	s, err := UntaggedSegments(0x43, 0, 0, 1, n, maxP)
	if err != nil {
		t.Fatal(err)
	}
	wantCount := uint32((n + uint64(maxP) - 1) / uint64(maxP))
	if s.Count() != wantCount {
		t.Fatalf("Count = %d, want %d", s.Count(), wantCount)
	}
	first := s.Segment(0)
	if first.Header.MO != 0 || first.Len != maxP || first.Header.Last {
		t.Fatalf("first = %+v", first)
	}
	last := s.Segment(wantCount - 1)
	wantOff := uint32(wantCount-1) * uint32(maxP)
	if last.Header.MO != wantOff || last.Offset != wantOff || uint64(last.Offset)+uint64(last.Len) != n || !last.Header.Last {
		t.Fatalf("last = %+v", last)
	}
	prev := s.Segment(wantCount - 2)
	if prev.Header.Last || prev.Offset+uint32(prev.Len) != last.Offset {
		t.Fatalf("second to last = %+v", prev)
	}
	if (s.Segment(wantCount) != Segment{}) {
		t.Fatal("Segment(Count) not zero")
	}

	// The largest untagged message, 2^32−1 octets, with 1-octet segments.
	s, err = UntaggedSegments(0x43, 0, 0, 1, math.MaxUint32, 1)
	if err != nil {
		t.Fatal(err)
	}
	if s.Count() != math.MaxUint32 || s.Segment(math.MaxUint32-1).Header.MO != math.MaxUint32-1 {
		t.Fatalf("Count %d", s.Count())
	}

	// Tagged 2^31 at a high TO.
	to := uint64(math.MaxUint64) - n + 1 // last octet at TO 2^64−1
	ts, err := TaggedSegments(0x40, 7, to, n, 1<<20)
	if err != nil {
		t.Fatal(err)
	}
	if ts.Count() != 1<<11 || ts.Segment(ts.Count()-1).Header.TO != to+uint64(n-(1<<20)) {
		t.Fatalf("tagged large: count %d", ts.Count())
	}
}

func TestSegmentsErrors(t *testing.T) {
	if _, err := UntaggedSegments(0x43, 0, 0, 1, 10, 0); !errors.Is(err, ErrNoRoom) {
		t.Fatalf("maxPayload 0: %v", err)
	}
	if _, err := TaggedSegments(0x40, 1, 0, 10, -3); !errors.Is(err, ErrNoRoom) {
		t.Fatalf("maxPayload <0: %v", err)
	}
	if _, err := TaggedSegments(0x40, 1, math.MaxUint64-8, 10, 100); !errors.Is(err, iwerr.DDPTOWrap) {
		t.Fatalf("TO wrap: %v", err)
	}
	if _, err := TaggedSegments(0x40, 1, math.MaxUint64-9, 10, 100); err != nil {
		t.Fatalf("last octet at 2^64-1: %v", err)
	}
	if _, err := TaggedSegments(0x40, 1, math.MaxUint64, 0, 100); err != nil {
		t.Fatalf("zero length at 2^64-1: %v", err)
	}
}

func TestSegmenterNoAllocs(t *testing.T) {
	allocs := testing.AllocsPerRun(10, func() {
		s, _ := UntaggedSegments(0x43, 0, 0, 1, 100000, 1000)
		for {
			if _, ok := s.Next(); !ok {
				break
			}
		}
		s.Reset()
	})
	if allocs != 0 {
		t.Fatalf("%v allocations per message", allocs)
	}
}

func TestMSNCounter(t *testing.T) {
	var c MSNCounter
	for want := uint32(1); want <= 3; want++ {
		if got, err := c.NextMSN(0); err != nil || got != want {
			t.Fatalf("QN0 NextMSN = %d, %v; want %d", got, err, want)
		}
	}
	// Queues are independent.
	if got, _ := c.NextMSN(2); got != 1 {
		t.Fatalf("QN2 first MSN = %d", got)
	}
	if got, _ := c.LastMSN(1); got != 0 {
		t.Fatalf("QN1 LastMSN = %d", got)
	}
	// Wrap modulo 2^32: ..., 2^32−1, 0, 1.
	c.last[1] = math.MaxUint32 - 1
	for _, want := range []uint32{math.MaxUint32, 0, 1} {
		if got, _ := c.NextMSN(1); got != want {
			t.Fatalf("wrap: got %d, want %d", got, want)
		}
	}
	if _, err := c.NextMSN(QueueCount); !errors.Is(err, ErrQueue) {
		t.Fatalf("QN out of range: %v", err)
	}
	if _, err := c.LastMSN(QueueCount); !errors.Is(err, ErrQueue) {
		t.Fatalf("LastMSN out of range: %v", err)
	}
}
