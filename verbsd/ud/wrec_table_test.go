package ud

import (
	"net/netip"
	"reflect"
	"testing"
	"time"
)

func TestWrecRecordPlace(t *testing.T) {
	type step struct {
		start, end uint32
		added      uint64
	}
	for _, tc := range []struct {
		name  string
		steps []step
		want  []Span
	}{
		{"in order", []step{{0, 10, 10}, {10, 20, 10}, {20, 25, 5}}, []Span{{0, 25}}},
		{"reverse", []step{{20, 25, 5}, {10, 20, 10}, {0, 10, 10}}, []Span{{0, 25}}},
		{"hole", []step{{0, 10, 10}, {20, 30, 10}}, []Span{{0, 10}, {20, 30}}},
		{"fill hole", []step{{0, 10, 10}, {20, 30, 10}, {10, 20, 10}}, []Span{{0, 30}}},
		{"duplicate", []step{{0, 10, 10}, {0, 10, 0}}, []Span{{0, 10}}},
		{"overlap both", []step{{0, 10, 10}, {20, 30, 10}, {5, 25, 10}}, []Span{{0, 30}}},
		{"cover many", []step{{2, 3, 1}, {5, 6, 1}, {8, 9, 1}, {0, 10, 7}}, []Span{{0, 10}}},
		{"empty", []step{{4, 4, 0}}, nil},
		{"middle insert", []step{{0, 1, 1}, {9, 10, 1}, {4, 5, 1}}, []Span{{0, 1}, {4, 5}, {9, 10}}},
	} {
		r := &WrecRecord{}
		total := uint64(0)
		for i, s := range tc.steps {
			added, ok := r.Place(s.start, s.end)
			if !ok || added != s.added {
				t.Errorf("%s: step %d %v: added %d ok %v, want %d", tc.name, i, s, added, ok, s.added)
			}
			total += added
		}
		if !reflect.DeepEqual(r.Spans, tc.want) || r.Got != total {
			t.Errorf("%s: spans %v got %d, want %v", tc.name, r.Spans, r.Got, tc.want)
		}
	}
}

func TestWrecRecordRangeLimit(t *testing.T) {
	r := &WrecRecord{}
	for i := range MaxWrecRanges {
		if _, ok := r.Place(uint32(2*i), uint32(2*i+1)); !ok {
			t.Fatalf("range %d refused", i)
		}
	}
	if _, ok := r.Place(uint32(2*MaxWrecRanges), uint32(2*MaxWrecRanges+1)); ok {
		t.Fatal("range beyond the limit accepted")
	}
	if _, ok := r.Place(1, 2); !ok || len(r.Spans) != MaxWrecRanges-1 { // merging always works
		t.Fatalf("merge refused or wrong: %d spans", len(r.Spans))
	}
}

func TestWrecTombs(t *testing.T) {
	var tb WrecTable
	now := time.Unix(1000, 0)
	k := func(i int) WrecKey {
		return WrecKey{Src: netip.MustParseAddrPort("10.0.0.1:5"), Stag: 7, Id: uint32(i)}
	}
	for i := range MaxWrecTombs + 10 {
		tb.Bury(k(i), now.Add(time.Second))
	}
	if len(tb.Tombs) != MaxWrecTombs || tb.Dead(k(0), now) || !tb.Dead(k(MaxWrecTombs+9), now) || !tb.Dead(k(10), now) {
		t.Fatal("tombstone ring wrong")
	}
	if tb.Dead(k(20), now.Add(2*time.Second)) {
		t.Fatal("tombstone did not expire")
	}
}

// FuzzWrecRecordPlace: any sequence of ranges keeps the spans sorted,
// disjoint, not adjacent, and got equal to the octets they cover.
func FuzzWrecRecordPlace(f *testing.F) {
	f.Add([]byte{0, 10, 20, 30, 5, 25})
	f.Add([]byte{9, 10, 0, 1, 4, 5, 0, 255})
	f.Fuzz(func(t *testing.T, b []byte) {
		r := &WrecRecord{}
		for i := 0; i+1 < len(b); i += 2 {
			s, e := uint32(b[i]), uint32(b[i+1])
			if e < s {
				s, e = e, s
			}
			r.Place(s, e)
		}
		sum := uint64(0)
		for i, s := range r.Spans {
			if s.Start >= s.End || (i > 0 && r.Spans[i-1].End >= s.Start) {
				t.Fatalf("spans not sorted/disjoint/merged: %v", r.Spans)
			}
			sum += uint64(s.End - s.Start)
		}
		if sum != r.Got {
			t.Fatalf("got %d, spans cover %d: %v", r.Got, sum, r.Spans)
		}
	})
}
