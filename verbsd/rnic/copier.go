package rnic

import (
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"
)

// The copier: every access to a session's process memory (rnic/procmem.go)
// runs on a goroutine of that session, never on an engine thread or a
// control goroutine. A page of the client can take as long as the client
// likes to come (a FUSE or NFS mapping, anything whose fault waits on
// someone): the copier's thread waits in the fault, the caller waits at
// most the bound (-procmem-stall-timeout, docs/iwarpd.md).
//
//   - The caller (an engine, or the session's control goroutine probing a
//     registration) posts the access, spins briefly on its completion
//     (copierSpin: a copy from resident memory finishes within it, and an
//     engine thread then neither parks nor hands its processor away), then
//     blocks with the bound.
//   - Past the bound the access fails (errStalled) and the copier is
//     stalled for good: every later access of the session fails at once,
//     without waiting, and onStall runs once (the session logs, and its
//     user gets a strike: rnic/procstrike.go). The staging buffer the
//     stuck copy uses is abandoned to it (rnic/stage.go: a stalled
//     session's buffers are not reused).
//   - Accesses of one session are serialized (mu): engines serving QPs of
//     one session, and its control goroutine, wait for each other — never
//     for another session. A caller waiting for mu counts the wait in its
//     bound, since the holder fails at its own bound and marks the copier
//     stalled.
//   - The copier alone closes the descriptor, when asked (close) and no
//     access is in progress: a copier stuck in a fault returns when the
//     fault does (the client process exits at the latest), and until then
//     the session still counts against its user's session limit
//     (verbsd/session_serve.go).

// copyOp is what a copier job does.
type copyOp uint8

const (
	copyRead copyOp = iota
	copyWrite
	copyProbe // two 1-octet reads: the first and last octets of [addr, addr+n)
)

// Copier job states (copier.state).
const (
	jobIdle uint32 = iota
	jobPosted
	jobFinished
)

// copierSpin bounds the caller's spin before it blocks.
const copierSpin = 20 * time.Microsecond

// errStalled: an access did not finish within the bound (now or earlier).
var errStalled = Errf(unix.ETIMEDOUT, "an access to this client's process memory did not finish within the bound "+
	"(-procmem-stall-timeout); the session's process memory is stalled and every further access fails "+
	"(a page of the client that does not come: FUSE, NFS, userfaultfd); register memory that is resident, "+
	"or an ofverbs Buffer / libiwverbs shared buffer, and open a new session")

type copier struct {
	fd      int
	bound   time.Duration
	spin    bool // GOMAXPROCS > 1 at start
	onStall func(what string)

	mu    sync.Mutex // one access at a time
	job   copyJob    // the posted access (written by the caller before posting)
	state atomic.Uint32
	jobs  chan struct{} // a job was posted
	done  chan struct{} // a job finished (may hold a token of an earlier job)
	timer *time.Timer   // under mu

	stalled atomic.Bool
	quit    chan struct{}
	quitted sync.Once
	exited  chan struct{}
}

type copyJob struct {
	op   copyOp
	b    []byte
	addr uint64
	n    uint64
	err  error
}

func newCopier(fd int, bound time.Duration, onStall func(string)) *copier {
	c := &copier{fd: fd, bound: bound, spin: runtime.GOMAXPROCS(0) > 1, onStall: onStall, jobs: make(chan struct{}, 1), done: make(chan struct{}, 1),
		quit: make(chan struct{}), exited: make(chan struct{})}
	c.timer = time.NewTimer(time.Hour)
	c.timer.Stop()
	go c.run()
	return c
}

// run is the copier goroutine.
func (c *copier) run() {
	defer close(c.exited)
	defer unix.Close(c.fd)
	for {
		select {
		case <-c.jobs:
			c.runJob()
		case <-c.quit:
			select { // a job posted as the session ended still runs
			case <-c.jobs:
				c.runJob()
			default:
			}
			return
		}
	}
}

func (c *copier) runJob() {
	j := &c.job
	j.err = c.exec(j)
	c.state.Store(jobFinished)
	select {
	case c.done <- struct{}{}:
	default:
	}
}

func (c *copier) exec(j *copyJob) error {
	switch j.op {
	case copyRead:
		return preadMem(c.fd, j.b, j.addr)
	case copyWrite:
		return pwriteMem(c.fd, j.b, j.addr)
	}
	var b [1]byte
	if err := preadMem(c.fd, b[:], j.addr); err != nil {
		return err
	}
	if j.n > 1 {
		return preadMem(c.fd, b[:], j.addr+j.n-1)
	}
	return nil
}

// do runs one access on the copier and waits for it, at most the bound.
func (c *copier) do(op copyOp, b []byte, addr, n uint64) error {
	if c.stalled.Load() {
		return errStalled
	}
	start := time.Now()
	if !c.mu.TryLock() {
		// Another engine of this session (or its control goroutine) is
		// accessing: wait for it, within the bound.
		for !c.mu.TryLock() {
			if c.stalled.Load() || time.Since(start) > c.bound {
				return errStalled
			}
			time.Sleep(20 * time.Microsecond)
		}
	}
	defer c.mu.Unlock()
	if c.stalled.Load() {
		return errStalled
	}
	c.job = copyJob{op: op, b: b, addr: addr, n: n}
	c.state.Store(jobPosted)
	c.jobs <- struct{}{} // never blocks: the copier is idle (mu, and not stalled)
	// Spin only where the copier can run meanwhile: with one P (a daemon
	// pinned to one CPU, GOMAXPROCS 1) it runs only once the caller blocks.
	// The copier, just readied, waits in this P's run queue: yield to it
	// (another P steals it only after a sleep), then spin.
	runtime.Gosched()
	if c.state.Load() == jobFinished {
		return c.finish()
	}
	for i := 0; c.spin; i++ {
		if c.state.Load() == jobFinished {
			return c.finish()
		}
		if i&63 == 63 {
			if time.Since(start) > copierSpin {
				break
			}
			runtime.Gosched()
		}
	}
	left := c.bound - time.Since(start)
	if left <= 0 {
		left = 1
	}
	c.timer.Reset(left)
	defer c.timer.Stop()
	for {
		select {
		case <-c.done:
			if c.state.Load() == jobFinished {
				return c.finish()
			}
			// a token of an earlier job finished during the spin
		case <-c.timer.C:
			if c.state.Load() == jobFinished {
				return c.finish()
			}
			c.stalled.Store(true)
			what := "read"
			switch op {
			case copyWrite:
				what = "write"
			case copyProbe:
				what = "probe"
			}
			if c.onStall != nil {
				c.onStall(what)
			}
			return errStalled
		}
	}
}

// finish takes the result of the finished job (under mu).
func (c *copier) finish() error {
	err := c.job.err
	c.job = copyJob{}
	c.state.Store(jobIdle)
	return err
}

// close asks the copier to end (idempotent); the channel is closed when it
// has.
func (c *copier) close() <-chan struct{} {
	c.quitted.Do(func() { close(c.quit) })
	return c.exited
}
