package rnic

import (
	"math"
	"runtime"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// The copier: every access to a session's process memory (rnic/procmem.go)
// runs on a thread of that session (rnic/copier_thread.go), never on an
// engine thread or a control goroutine. A page of the client can take as
// long as the client likes to come (a FUSE or NFS mapping, anything whose
// fault waits on someone): the copier's thread waits in the fault, the
// caller waits at most the bound (-procmem-stall-timeout, docs/iwarpd.md).
//
//   - The caller (an engine, or the session's control goroutine probing a
//     registration) posts the access in the copier's job words and wakes
//     the copier with a futex wake if it sleeps. It then polls for the
//     completion up to copierSpin: pause-spinning for copierPause (with
//     more than one CPU: a small copy on another CPU finishes within it),
//     then with sched_yield(2), which hands its CPU to the copier if they
//     share one and returns at once if not (pure spinning made them take
//     turns a time slice each when another process had the other CPU:
//     50 µs per access instead of 10). Then it sleeps in futex_wait with
//     what is left of the bound. After a job the copier polls the same
//     way for the next one, up to copierIdle, then sleeps. The copier
//     needs no P (it runs outside the scheduler: rnic/copier_thread.go),
//     so the caller keeps its own P throughout and no goroutine is parked
//     or readied.
//   - Past the bound the access fails (errStalled) and the copier is
//     stalled for good: every later access of the session fails at once,
//     without waiting, and onStall runs once (the session logs, and its
//     user gets a strike: rnic/procstrike.go). The staging buffer the
//     stuck copy uses is abandoned to it (copier.keep holds it; rnic/stage.go:
//     a stalled session's buffers are not reused).
//   - Accesses of one session are serialized (mu): engines serving QPs of
//     one session, and its control goroutine, wait for each other — never
//     for another session. A caller waiting for mu counts the wait in its
//     bound, since the holder fails at its own bound and marks the copier
//     stalled.
//   - The thread starts at the session's first access (most sessions
//     never touch process memory). The copier alone closes the
//     descriptor, when asked (close) and no access is in progress: a
//     copier stuck in a fault returns when the fault does (the client
//     process exits at the latest), and until then the session still
//     counts against its user's session limit (verbsd/session_serve.go).

// copyOp is what a copier job does.
type copyOp uint32

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

// How the caller and the copier poll before they sleep in futex_wait:
// copierPause of pause-spinning (with more than one CPU), then polling
// with sched_yield(2) up to copierSpin (the caller, for a completion) or
// copierIdle (the copier, for the next job) since they began.
const (
	copierPause = 2 * time.Microsecond
	copierSpin  = 20 * time.Microsecond
	copierIdle  = 50 * time.Microsecond
)

// errStalled: an access did not finish within the bound (now or earlier).
var errStalled = Errf(unix.ETIMEDOUT, "an access to this client's process memory did not finish within the bound "+
	"(-procmem-stall-timeout); the session's process memory is stalled and every further access fails "+
	"(a page of the client that does not come: FUSE, NFS, userfaultfd); register memory that is resident, "+
	"or an ofverbs Buffer / libiwverbs shared buffer, and open a new session")

// errCopierClosed: an access after the session ended.
var errCopierClosed = Errf(unix.EBADF, "the session's process memory is closed (the session ended)")

type copier struct {
	// Words shared with the copier thread: written and read there with
	// procLoad/procStore, here with sync/atomic.
	state   uint32 // jobIdle, jobPosted, jobFinished
	wake    uint32 // the sleeping copier's futex word: bumped by every post and by close
	asleep  uint32 // the copier is in (or about to enter) futex_wait on wake
	waiting uint32 // the caller is in (or about to enter) futex_wait on state
	quit    uint32 // close asked the copier to end

	// The posted job, written by the caller before it posts (under mu),
	// read by the copier thread; the result written by the copier before
	// it finishes.
	op       copyOp
	fd       int
	buf      uintptr // the job's octets: keep's
	n        uintptr
	addr     uint64
	last     uint64  // copyProbe: the address of the last octet
	res      uintptr // octets the (last) system call moved
	errno    uintptr // its error, 0 if none
	keep     []byte  // keeps buf alive while the copy may run (for good once stalled)
	probeBuf [1]byte

	bound    time.Duration
	multiCPU bool // pause-spin first (copierPause): the copier may be running beside
	onStall  func(what string)

	mu        sync.Mutex // one access at a time
	started   sync.Once  // the thread, at the first access (or nothing, at close)
	unstarted bool       // close came first: no thread, the descriptor closed
	stalled   atomic.Bool
	quitted   sync.Once
	exited    chan struct{}
}

func newCopier(fd int, bound time.Duration, onStall func(string)) *copier {
	return &copier{fd: fd, bound: bound, multiCPU: runtime.NumCPU() > 1, onStall: onStall, exited: make(chan struct{})}
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
	c.started.Do(func() { go c.run() }) // rnic/copier_thread.go
	if c.unstarted {
		return errCopierClosed
	}
	want := len(b)
	switch op {
	case copyProbe:
		want = 1
		if n == 0 || addr > math.MaxInt64-n {
			return unix.EFAULT
		}
		c.last = addr + n - 1
	default:
		if addr > math.MaxInt64-uint64(len(b)) {
			return unix.EFAULT
		}
		c.buf, c.n, c.keep = uintptr(unsafe.Pointer(&b[0])), uintptr(len(b)), b
	}
	c.op, c.addr = op, addr
	atomic.StoreUint32(&c.state, jobPosted)
	atomic.AddUint32(&c.wake, 1)
	if atomic.LoadUint32(&c.asleep) != 0 {
		rawFutex(&c.wake, futexWakePrivate, 1, 0)
	}
	// Poll for the completion: pause-spin while a small copy on another
	// CPU would finish, then sched_yield(2) (hands this CPU to the copier
	// if they share it, returns at once if not), then sleep.
	for {
		if atomic.LoadUint32(&c.state) == jobFinished {
			return c.finish(want)
		}
		d := time.Since(start)
		if d > copierSpin {
			break
		}
		if c.multiCPU && d < copierPause {
			procPause()
		} else {
			schedYield()
		}
	}
	for {
		if atomic.LoadUint32(&c.state) == jobFinished {
			return c.finish(want)
		}
		left := c.bound - time.Since(start)
		if left <= 0 {
			break
		}
		atomic.StoreUint32(&c.waiting, 1)
		if atomic.LoadUint32(&c.state) == jobPosted {
			// The scheduler's system call: a long wait lets sysmon hand
			// this P to others. EINTR, EAGAIN and timeouts come round.
			ts := unix.NsecToTimespec(int64(left))
			unix.Syscall6(unix.SYS_FUTEX, uintptr(unsafe.Pointer(&c.state)), futexWaitPrivate, uintptr(jobPosted),
				uintptr(unsafe.Pointer(&ts)), 0, 0)
		}
		atomic.StoreUint32(&c.waiting, 0)
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

// finish takes the result of the finished job (under mu).
func (c *copier) finish(want int) error {
	n, errno := int(c.res), unix.Errno(c.errno)
	c.keep, c.buf = nil, 0
	atomic.StoreUint32(&c.state, jobIdle)
	var err error
	if errno != 0 {
		err = errno
	}
	return memResult(n, want, err)
}

// close asks the copier to end (idempotent); the channel is closed when it
// has.
func (c *copier) close() <-chan struct{} {
	c.quitted.Do(func() {
		c.started.Do(func() {
			c.unstarted = true
			unix.Close(c.fd)
			close(c.exited)
		})
		if c.unstarted {
			return
		}
		atomic.StoreUint32(&c.quit, 1)
		atomic.AddUint32(&c.wake, 1)
		rawFutex(&c.wake, futexWakePrivate, 1, 0)
	})
	return c.exited
}
