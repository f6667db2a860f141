package main

import (
	"errors"
	"testing"
	"time"
)

// fakeCQ is a completion queue for the waiter tests: poll consumes what
// is there; a completion arrives while block arms the CQ (the window
// between the waiter's last try and block's re-check).
type fakeCQ struct {
	ready, got int
}

func (c *fakeCQ) poll() (int, error) {
	n := c.ready
	c.ready = 0
	c.got = n
	return n, nil
}

// block behaves as verbsTransport.block: arm (the completion lands now),
// re-check, and return without sleeping when the check found something.
func (c *fakeCQ) block(check func() (bool, error)) func(time.Duration) error {
	return func(d time.Duration) error {
		c.ready++
		if ok, err := check(); ok || err != nil {
			return err
		}
		time.Sleep(d)
		return nil
	}
}

// TestLatchedKeepsCompletionFoundByBlock: the completion consumed by
// block's re-check is the one the wait returns (the RC Read "timed out"
// and "out of order" reports of iwarp-perf: waitSendCompletions polled
// again after block and dropped it).
func TestLatchedKeepsCompletionFoundByBlock(t *testing.T) {
	w := waiter{pollWindow: 0, timeout: 50 * time.Millisecond}

	cq := &fakeCQ{}
	try := latched(cq.poll)
	if err := w.wait(try, cq.block(try)); err != nil {
		t.Fatalf("latched: %v", err)
	}
	if cq.got != 1 {
		t.Fatalf("latched: the wait ended with %d completions polled last, want 1", cq.got)
	}

	// The unlatched try (the bug): the completion is consumed by block's
	// check, then the waiter polls again and finds nothing.
	cq = &fakeCQ{}
	plain := func() (bool, error) { n, err := cq.poll(); return n > 0, err }
	calls := 0
	blk := cq.block(plain)
	err := w.wait(plain, func(d time.Duration) error {
		calls++
		if calls > 1 {
			return errors.New("stop") // one completion only
		}
		return blk(d)
	})
	if err == nil && cq.got == 1 {
		t.Fatal("the unlatched try kept the completion: the test does not exercise the lost completion")
	}

	// A failing poll is not latched.
	boom := errors.New("boom")
	try = latched(func() (int, error) { return 1, boom })
	if ok, err := try(); ok || !errors.Is(err, boom) {
		t.Fatalf("failing poll: %v %v", ok, err)
	}
}
