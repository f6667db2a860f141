package rnic

import (
	"runtime"
	"sync/atomic"
	"testing"
	"time"

	"github.com/iwarpd/iwarpd/verbsd/config"
	"golang.org/x/sys/unix"
)

// pinThread binds the calling (locked) thread to cpu.
func pinThread(t *testing.T, cpu int) {
	t.Helper()
	var set unix.CPUSet
	set.Set(cpu)
	if err := unix.SchedSetaffinity(0, &set); err != nil {
		t.Skipf("cannot bind a thread to CPU %d: %v", cpu, err)
	}
}

// TestIdlerYieldNeverSleeps: -idle yield gives the CPU away with
// sched_yield only, and never reports contention.
func TestIdlerYieldNeverSleeps(t *testing.T) {
	cfg := config.DefaultConfig()
	cfg.Idle = config.IdleYield
	d := newIdler(&cfg)
	for range 1000 {
		d.idle()
	}
	if d.yields != 1000 || d.sleeps != 0 || d.contended(time.Now()) {
		t.Fatalf("yield mode: %d yields, %d sleeps, contended %v; want 1000, 0, false", d.yields, d.sleeps, d.contended(time.Now()))
	}
}

// TestIdlerAdaptiveSleepsWhenContended: the adaptive engine yields first;
// with a thread that never waits bound to its CPU, its yields come back
// after that thread's time slices, and it starts sleeping instead and
// reports the CPU contended (the engine then skips its poll window). No
// time is asserted: which call it makes is.
func TestIdlerAdaptiveSleepsWhenContended(t *testing.T) {
	// Locked and never unlocked: the thread, bound to CPU 0 below, ends
	// with the test rather than serve other goroutines.
	runtime.LockOSThread()
	cfg := config.DefaultConfig()
	d := newIdler(&cfg)
	d.idle()
	if d.yields != 1 || d.sleeps != 0 {
		t.Fatalf("the first idle: %d yields, %d sleeps; want 1 and 0", d.yields, d.sleeps)
	}
	pinThread(t, 0)
	d.setSlack()
	var stop atomic.Bool
	started := make(chan struct{})
	go func() { // the busy neighbour, on the same CPU
		runtime.LockOSThread() // never unlocked, as above
		pinThread(t, 0)
		close(started)
		for !stop.Load() {
		}
	}()
	<-started
	deadline := time.Now().Add(20 * time.Second) // a bound against a hang only
	n := 0
	for d.sleeps == 0 && n < 200000 && time.Now().Before(deadline) {
		d.idle()
		n++
	}
	stop.Store(true)
	t.Logf("the first sleep after %d idles (%d yields)", n, d.yields)
	if d.sleeps == 0 || !d.contended(time.Now()) {
		t.Fatalf("%d idles beside a busy thread on the same CPU: %d sleeps, contended %v; want sleeps and contention",
			n, d.sleeps, d.contended(time.Now()))
	}
}
