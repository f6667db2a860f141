package main

import (
	"io"
	"strings"
	"testing"
)

// TestQPChunkNeverStalls checks, for every window and QP count, the
// invariant the multi-QP bw sender's progress rests on: when a QP's window
// share is too full for its next chunk, at least one credit boundary (a
// multiple of creditEvery of the share) lies among its unacknowledged
// messages, so the receiver, taking messages in order, sends a credit.
func TestQPChunkNeverStalls(t *testing.T) {
	for window := 1; window <= 512; window++ {
		for qps := 1; qps <= maxQPs && qps <= window; qps++ {
			wq := qpWindow(window, qps)
			c := qpChunk(window, qps, min(window, 64))
			every := creditEvery(wq)
			// Stalled: outstanding + c > wq, so outstanding >= wq-c+1.
			if c < 1 || c > wq || wq-c+1 < every {
				t.Fatalf("window %d, %d QPs: share %d, chunk %d, credit every %d: a stall may see no credit", window, qps, wq, c, every)
			}
		}
	}
}

func TestPerQPTotals(t *testing.T) {
	got := perQPTotals(10, 2, 3) // iterations 0 1 | 2 3 | 4 5 | 6 7 | 8 9 -> QPs 0 1 2 0 1
	want := []uint64{4, 4, 2}
	for q := range want {
		if got[q] != want[q] {
			t.Fatalf("perQPTotals(10, 2, 3) = %v, want %v", got, want)
		}
	}
	for k, q := range map[uint64]int{0: 0, 1: 0, 2: 1, 5: 2, 6: 0, 9: 1} {
		if g := qpOf(k, 2, 3); g != q {
			t.Errorf("qpOf(%d, 2, 3) = %d, want %d", k, g, q)
		}
	}
}

func TestParseConfigQPs(t *testing.T) {
	c, err := parseConfig([]string{"-t", "rc", "-qps", "8", "-m", "bw"}, io.Discard)
	if err != nil || c.qps != 8 {
		t.Fatalf("-qps 8: %+v, %v", c, err)
	}
	if c, err := parseConfig(nil, io.Discard); err != nil || c.qps != 1 {
		t.Fatalf("default -qps: %d, %v", c.qps, err)
	}
	for _, tt := range []struct {
		args []string
		want string
	}{
		{[]string{"-qps", "0"}, "-qps 0: want 1..64"},
		{[]string{"-qps", "65"}, "-qps 65: want 1..64"},
		{[]string{"-qps", "2", "-raw", "udp"}, "needs -o send over iwarpd"},
		{[]string{"-qps", "2", "-t", "rc", "-o", "write"}, "needs -o send over iwarpd"}, // write lat
		{[]string{"-qps", "2", "-t", "rc", "-o", "read", "-m", "bw"}, "or -t rc -o write -m bw"},
		{[]string{"-qps", "4", "-qp-port", "65533"}, "past 65535 with -qps 4"},
		{[]string{"-qps", "8", "-n", "7"}, "-n 7: want at least one message per QP"},
		{[]string{"-qps", "8", "-n", "100"}, "-n 100: lat with -qps 8 runs rounds of one message per QP: want a multiple of 8"},
	} {
		_, err := parseConfig(tt.args, io.Discard)
		if err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%v: error %v, want %q", tt.args, err, tt.want)
		}
	}
}

// TestWriteSchedule: the multi-QP Write schedule covers every iteration
// once, on the QP qpOf says, at the QP-local index globalIter inverts; no
// post crosses a marker; markers fall every `every` Writes of a QP and at
// its last.
func TestWriteSchedule(t *testing.T) {
	for _, tt := range []struct{ iters, window, qps, batch int }{
		{1001, 12, 3, 12}, {64, 64, 64, 64}, {1000, 64, 7, 64}, {5, 2, 2, 2}, {333, 4096, 5, 64},
	} {
		chunk := qpChunk(tt.window, tt.qps, tt.batch)
		every := uint64(creditEvery(qpWindow(tt.window, tt.qps)))
		totals := perQPTotals(tt.iters, chunk, tt.qps)
		seen := make([]bool, tt.iters)
		count := make([]uint64, tt.qps)
		err := writeSchedule(tt.iters, chunk, tt.qps, every, func(st writeStep) error {
			if st.j != count[st.q] || st.k == 0 || st.j/every != (st.j+st.k-1)/every {
				t.Fatalf("%+v: step %+v after %d Writes of QP %d", tt, st, count[st.q], st.q)
			}
			for i := range st.k {
				k := globalIter(st.q, st.j+i, chunk, tt.qps)
				if k >= uint64(tt.iters) || seen[k] || qpOf(k, chunk, tt.qps) != st.q {
					t.Fatalf("%+v: QP %d Write %d is iteration %d (seen %v)", tt, st.q, st.j+i, k, k < uint64(tt.iters) && seen[k])
				}
				seen[k] = true
			}
			count[st.q] += st.k
			if want := count[st.q]%every == 0 || count[st.q] == totals[st.q]; st.marker != want {
				t.Fatalf("%+v: step %+v: marker %v, want %v", tt, st, st.marker, want)
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		for k, ok := range seen {
			if !ok {
				t.Fatalf("%+v: iteration %d never written", tt, k)
			}
		}
	}
}
