package rnic

import (
	"runtime"
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"
)

// The copier thread (rnic/copier.go has the protocol with its callers).
//
// A session's copier is an OS thread of its own that, once started, runs
// outside the Go scheduler: its goroutine is locked to the thread and
// enters the scheduler's syscall state for good (entersyscallblock, which
// hands its P to others at once), then waits for jobs with futex(2) and
// runs them with pread(2)/pwrite(2), all as raw system calls. So it never
// needs a P to run: a caller on a locked engine thread posts a job and
// wakes the copier with one futex wake (none if the copier is still
// spinning after its last job), and the copier's completion wakes the
// caller with another (none if the caller is spinning). Through the
// scheduler (a goroutine and channels, as before) the same hand-off cost
// two or more park/unpark round trips of threads and P hand-offs, ~20 µs
// from a locked thread (docs/memory-registration.md "Cost of the
// descriptor and the copier").
//
// The code that runs in that state is restricted as the runtime's own
// syscall wrappers are: nosplit functions only (the stack cannot grow),
// no allocation, no write barriers (no pointer stores), no instrumented
// atomics (procLoad/procStore are assembly; go:norace keeps the race
// detector out), no pointer-holding locals that change (the GC scans the
// frame as it was at entersyscallblock). Everything it touches lives in
// the copier struct, on the heap; the buffer of a job is kept alive by
// copier.keep. runtime.entersyscallblock, runtime.exitsyscall and
// runtime.nanotime are linknamed as gVisor does (the runtime keeps their signatures for it:
// go.dev/issue/67401).

//go:linkname entersyscallblock runtime.entersyscallblock
func entersyscallblock()

//go:linkname exitsyscall runtime.exitsyscall
func exitsyscall()

// nanotime is the runtime's monotonic clock (the vDSO; nosplit, needs no
// P), linknamed as many packages do.
//
//go:linkname nanotime runtime.nanotime
func nanotime() int64

// futex(2) operations, process-private (linux/futex.h: FUTEX_WAIT 0,
// FUTEX_WAKE 1, FUTEX_PRIVATE_FLAG 128).
const (
	futexWaitPrivate = 0 | 128
	futexWakePrivate = 1 | 128
)

// daemonCPUs is the daemon's CPU affinity at start (before any engine
// pinned its thread).
var daemonCPUs, daemonCPUsOK = func() (unix.CPUSet, bool) {
	var set unix.CPUSet
	return set, unix.SchedGetaffinity(0, &set) == nil
}()

// run is the copier's goroutine: it locks itself to its thread, serves
// jobs until close, then closes the descriptor. The thread exits with the
// goroutine (it stays locked).
func (c *copier) run() {
	runtime.LockOSThread()
	// The thread may have been cloned by a pinned engine thread (several
	// engines, rnic/engines.go pin): run anywhere the daemon may, so that
	// the copy need not wait for the engine's own CPU.
	if daemonCPUsOK {
		unix.SchedSetaffinity(0, &daemonCPUs)
	}
	c.serve()
	unix.Close(c.fd)
	close(c.exited)
}

// serve runs jobs until quit, outside the scheduler (see above).
//
//go:nosplit
//go:norace
func (c *copier) serve() {
	if copierOffP {
		entersyscallblock()
	}
	for {
		if procLoad(&c.state) == jobPosted {
			c.exec()
			procStore(&c.state, jobFinished)
			if procLoad(&c.waiting) != 0 {
				rawFutex(&c.state, futexWakePrivate, 1, 0)
			}
			continue
		}
		if procLoad(&c.quit) != 0 {
			break
		}
		w := procLoad(&c.wake)
		if c.idleSpin() {
			continue
		}
		procStore(&c.asleep, 1)
		if procLoad(&c.state) != jobPosted && procLoad(&c.quit) == 0 {
			// Returns at once if a post or close bumped wake since w was
			// read; EINTR (a signal) comes round again.
			c.sleep(w)
		}
		procStore(&c.asleep, 0)
	}
	if copierOffP {
		exitsyscall()
	}
}

// sleep waits on c.wake while it holds w.
//
//go:nosplit
//go:norace
func (c *copier) sleep(w uint32) {
	if copierOffP {
		rawFutex(&c.wake, futexWaitPrivate, uintptr(w), 0)
		return
	}
	// With a P (copier_other.go): let the scheduler take it meanwhile.
	syscall.Syscall6(unix.SYS_FUTEX, uintptr(unsafe.Pointer(&c.wake)), futexWaitPrivate, uintptr(w), 0, 0, 0)
}

// idleSpin polls for the next job or quit (as the caller polls for a
// completion: rnic/copier.go) up to copierIdle, and reports whether one
// came. A pass of an engine reads or writes a session's memory several
// times in a row (one datagram, FPDU or window at a time), and a
// ping-pong comes back within the engine's poll window: the copier, still
// polling, takes them without a wake-up.
//
//go:nosplit
//go:norace
func (c *copier) idleSpin() bool {
	start := nanotime()
	for {
		if procLoad(&c.state) == jobPosted || procLoad(&c.quit) != 0 {
			return true
		}
		d := nanotime() - start
		if d > int64(copierIdle) {
			return false
		}
		if c.multiCPU && d < int64(copierPause) {
			procPause()
		} else {
			syscall.RawSyscall(unix.SYS_SCHED_YIELD, 0, 0, 0)
		}
	}
}

// exec runs the posted job: c.res is what the last system call moved,
// c.errno its error (0 if none).
//
//go:nosplit
//go:norace
func (c *copier) exec() {
	switch c.op {
	case copyRead:
		c.res, c.errno = rawPIO(unix.SYS_PREAD64, c.fd, c.buf, c.n, c.addr)
	case copyWrite:
		c.res, c.errno = rawPIO(unix.SYS_PWRITE64, c.fd, c.buf, c.n, c.addr)
	default: // copyProbe: the first and the last octet
		c.res, c.errno = rawPIO(unix.SYS_PREAD64, c.fd, uintptr(unsafe.Pointer(&c.probeBuf[0])), 1, c.addr)
		if c.errno == 0 && c.res == 1 && c.last != c.addr {
			c.res, c.errno = rawPIO(unix.SYS_PREAD64, c.fd, uintptr(unsafe.Pointer(&c.probeBuf[0])), 1, c.last)
		}
	}
}

//go:nosplit
//go:norace
func rawPIO(trap uintptr, fd int, buf, n uintptr, off uint64) (uintptr, uintptr) {
	r, _, e := syscall.RawSyscall6(trap, uintptr(fd), buf, n, uintptr(off), 0, 0)
	return r, uintptr(e)
}

//go:nosplit
//go:norace
func rawFutex(addr *uint32, op, val, timeout uintptr) uintptr {
	_, _, e := syscall.RawSyscall6(unix.SYS_FUTEX, uintptr(unsafe.Pointer(addr)), op, val, timeout, 0, 0)
	return uintptr(e)
}
