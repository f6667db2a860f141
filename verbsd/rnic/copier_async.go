package rnic

import (
	"time"
)

// Asynchronous reads on the copier (rnic/copier.go): a caller posts a read
// of process memory and goes on with other work while the copier's thread
// runs it, then collects it. An RD Read Response reads the next window of
// its source this way while the engine sends the current one
// (verbsd/rd/send.go prefetch): the pread of /proc/PID/mem on one CPU,
// the sendmmsg of the window before on the other, where a read the engine
// waited for made them take turns (docs/benchmarks.md "MPI large
// messages").
//
// Every rule of the copier holds: one job on it at a time, each bounded.
// An access that finds an asynchronous job still on the copier (any
// caller's: do, start, collect) first waits for it, within its own bound
// counted from its post, and keeps its result in its record (drain); past
// the bound the copier is stalled for good, as for any access. A caller
// that drops its record without collecting it must not reuse the buffer
// (the copier may still be writing it; copier.keep holds it until the job
// is drained).

// AsyncAccess is a read left running on a session's copier
// (ProcRegion.StartRead); Collect takes its result.
type AsyncAccess struct {
	c     *copier
	start time.Time // its post: the bound counts from here
	want  int       // the octets it must read
	done  bool      // drained: err is its result (under c.mu)
	err   error
}

// start posts a read of len(b) octets at addr (len(b) > 0) and returns at
// once.
func (c *copier) start(b []byte, addr uint64) (*AsyncAccess, error) {
	start := time.Now()
	if err := c.lock(start); err != nil { // drains an earlier asynchronous job
		return nil, err
	}
	defer c.mu.Unlock()
	if err := c.post(copyRead, b, addr, 0); err != nil {
		return nil, err
	}
	a := &AsyncAccess{c: c, start: start, want: len(b)}
	c.async = a
	return a, nil
}

// drain waits for the asynchronous job on the copier, if any, and keeps
// its result in its record (under mu).
func (c *copier) drain() {
	a := c.async
	if a == nil {
		return
	}
	c.async = nil
	a.err = c.wait(copyRead, a.start, a.want)
	a.done = true
}

// Collect reports whether the read finished and, if it did, its error
// (EFAULT: not all of it could be read; errStalled: past the bound). With
// block it waits for it, within its bound; without, it returns false
// while the copier still runs it (or another access holds the copier).
func (a *AsyncAccess) Collect(block bool) (bool, error) {
	c := a.c
	if !block {
		if !c.mu.TryLock() {
			return false, nil
		}
		if !a.done && c.async == a && !c.stalled.Load() && c.finished() {
			c.drain()
		}
		done, err := a.done, a.err
		c.mu.Unlock()
		return done, err
	}
	if err := c.lock(time.Now()); err != nil {
		return true, err
	}
	// lock drained every asynchronous job: a's result is in.
	err := a.err
	c.mu.Unlock()
	return true, err
}
