package rnic

import (
	"testing"
	"time"
)

// TestLogLimiter: a burst passes, then lines are refused until the bucket
// refills at one per Every, and the first line allowed afterwards carries
// the count of refused ones. Times are given, not measured.
func TestLogLimiter(t *testing.T) {
	l := &LogLimiter{Burst: 3, Every: time.Second}
	t0 := time.Unix(1000, 0)
	for i := range 3 {
		if ok, n := l.Allow(t0); !ok || n != 0 {
			t.Fatalf("line %d of the burst: ok=%v suppressed=%d", i, ok, n)
		}
	}
	for i := range 5 {
		if ok, _ := l.Allow(t0.Add(time.Duration(i) * 100 * time.Millisecond)); ok {
			t.Fatalf("line %d after the burst was allowed", i)
		}
	}
	ok, n := l.Allow(t0.Add(1500 * time.Millisecond))
	if !ok || n != 5 {
		t.Fatalf("after a refill: ok=%v suppressed=%d, want true 5", ok, n)
	}
	if ok, _ := l.Allow(t0.Add(1600 * time.Millisecond)); ok {
		t.Fatal("a second line within the same second was allowed")
	}
	// A long quiet period refills to Burst, not beyond.
	t1 := t0.Add(time.Hour)
	for i := range 3 {
		if ok, _ := l.Allow(t1); !ok {
			t.Fatalf("line %d after an hour refused", i)
		}
	}
	if ok, _ := l.Allow(t1); ok {
		t.Fatal("the bucket held more than Burst")
	}
	if Note(0) != "" || Note(2) == "" {
		t.Fatalf("Note(0)=%q Note(2)=%q", Note(0), Note(2))
	}
}
