package verbsd

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
		want  []span
	}{
		{"in order", []step{{0, 10, 10}, {10, 20, 10}, {20, 25, 5}}, []span{{0, 25}}},
		{"reverse", []step{{20, 25, 5}, {10, 20, 10}, {0, 10, 10}}, []span{{0, 25}}},
		{"hole", []step{{0, 10, 10}, {20, 30, 10}}, []span{{0, 10}, {20, 30}}},
		{"fill hole", []step{{0, 10, 10}, {20, 30, 10}, {10, 20, 10}}, []span{{0, 30}}},
		{"duplicate", []step{{0, 10, 10}, {0, 10, 0}}, []span{{0, 10}}},
		{"overlap both", []step{{0, 10, 10}, {20, 30, 10}, {5, 25, 10}}, []span{{0, 30}}},
		{"cover many", []step{{2, 3, 1}, {5, 6, 1}, {8, 9, 1}, {0, 10, 7}}, []span{{0, 10}}},
		{"empty", []step{{4, 4, 0}}, nil},
		{"middle insert", []step{{0, 1, 1}, {9, 10, 1}, {4, 5, 1}}, []span{{0, 1}, {4, 5}, {9, 10}}},
	} {
		r := &wrecRecord{}
		total := uint64(0)
		for i, s := range tc.steps {
			added, ok := r.place(s.start, s.end)
			if !ok || added != s.added {
				t.Errorf("%s: step %d %v: added %d ok %v, want %d", tc.name, i, s, added, ok, s.added)
			}
			total += added
		}
		if !reflect.DeepEqual(r.spans, tc.want) || r.got != total {
			t.Errorf("%s: spans %v got %d, want %v", tc.name, r.spans, r.got, tc.want)
		}
	}
}

func TestWrecRecordRangeLimit(t *testing.T) {
	r := &wrecRecord{}
	for i := range maxWrecRanges {
		if _, ok := r.place(uint32(2*i), uint32(2*i+1)); !ok {
			t.Fatalf("range %d refused", i)
		}
	}
	if _, ok := r.place(uint32(2*maxWrecRanges), uint32(2*maxWrecRanges+1)); ok {
		t.Fatal("range beyond the limit accepted")
	}
	if _, ok := r.place(1, 2); !ok || len(r.spans) != maxWrecRanges-1 { // merging always works
		t.Fatalf("merge refused or wrong: %d spans", len(r.spans))
	}
}

func TestWrecTombs(t *testing.T) {
	var tb wrecTable
	now := time.Unix(1000, 0)
	k := func(i int) wrecKey {
		return wrecKey{src: netip.MustParseAddrPort("10.0.0.1:5"), stag: 7, id: uint32(i)}
	}
	for i := range maxWrecTombs + 10 {
		tb.bury(k(i), now.Add(time.Second))
	}
	if len(tb.tombs) != maxWrecTombs || tb.dead(k(0), now) || !tb.dead(k(maxWrecTombs+9), now) || !tb.dead(k(10), now) {
		t.Fatal("tombstone ring wrong")
	}
	if tb.dead(k(20), now.Add(2*time.Second)) {
		t.Fatal("tombstone did not expire")
	}
}

// FuzzWrecRecordPlace: any sequence of ranges keeps the spans sorted,
// disjoint, not adjacent, and got equal to the octets they cover.
func FuzzWrecRecordPlace(f *testing.F) {
	f.Add([]byte{0, 10, 20, 30, 5, 25})
	f.Add([]byte{9, 10, 0, 1, 4, 5, 0, 255})
	f.Fuzz(func(t *testing.T, b []byte) {
		r := &wrecRecord{}
		for i := 0; i+1 < len(b); i += 2 {
			s, e := uint32(b[i]), uint32(b[i+1])
			if e < s {
				s, e = e, s
			}
			r.place(s, e)
		}
		sum := uint64(0)
		for i, s := range r.spans {
			if s.start >= s.end || (i > 0 && r.spans[i-1].end >= s.start) {
				t.Fatalf("spans not sorted/disjoint/merged: %v", r.spans)
			}
			sum += uint64(s.end - s.start)
		}
		if sum != r.got {
			t.Fatalf("got %d, spans cover %d: %v", r.got, sum, r.spans)
		}
	})
}
