package rnic

import (
	"encoding/binary"
	"fmt"
	"runtime"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/iwarpd/iwarpd/internal/eventfd"
	"github.com/iwarpd/iwarpd/proto"
	"github.com/iwarpd/iwarpd/verbsd/config"
	"golang.org/x/sys/unix"
)

// Engine is the RNIC: one goroutine, locked to an OS thread, that owns
// every data-path object (sessions' tables, QPs, CQs, sockets). Control
// goroutines hand it work with Do; it serves QPs round-robin with bounded
// work per QP per pass, polls (giving the CPU away between empty passes,
// rnic/idle.go) for Config.PollWindow, then sleeps in epoll_wait on every session's doorbell
// eventfd, its wake eventfd and every datagram socket.
type Engine struct {
	Cfg *config.Config
	// Ext is what the transports keep per engine, and their per-engine
	// work (a destroyed RD QP's lingering port): ud/qp.go.
	Ext []EngineHooks

	// Engines per core (rnic/engines.go): this engine's index, the device its
	// engines share, whether there are several (shared), the CPU its
	// thread is pinned to (-1: none) and the thread's id.
	ID     int
	dev    *Device
	Shared bool
	cpu    int
	tid    int
	// workPasses, wakeups: passes that did work, wake-ups from sleep
	// (iwarpctl's engine load).
	workPasses, wakeups uint64

	// completed: a pass posted a completion, so a client may be waiting
	// for the CPU (run yields at once; otherwise a busy engine yields
	// only every busyYieldEvery).
	completed bool
	// idle is how the engine gives its CPU away (rnic/idle.go).
	idle idler

	cmds    chan command
	wake    *eventfd.EventFD // control goroutines -> engine
	EpFD    int
	stopped chan struct{}

	status   []byte // the status page, mapped read-write here
	StatusFD int
	asleep   *atomic.Uint32
	Epoch    *atomic.Uint32

	// Engine-owned below.
	Quit bool
	QPs  []*QP
	ByFD map[int32]*QP
	rr   int
	// The ready list (rnic/ready.go): the QPs a pass serves.
	ready    []*QP
	Bells    map[int32]*Session // doorbell descriptor → its session
	probe    int                // the QP of qps the probe looked at last
	scanAll  bool               // the next pass serves every QP
	Visits   uint64             // QPs served or probed, all passes (tests: work per pass)
	Passes   uint64
	Sessions map[uint64]*Session
	cur      *Session    // the session being served (rnic/fault.go)
	curQP    *QP         // the QP being served in a pass (rnic/fault.go: a fault in its memory regions fails it alone)
	staged   []stagedBuf // staging buffers of the QP being served (rnic/stage.go)
	Stats    counters
	events   [64]unix.EpollEvent
}

type command struct {
	f    func() error
	done chan error
}

// newEngine makes an engine; ownStatus makes it create the status page
// (engine 0: the others share its words, rnic/engines.go).
func newEngine(cfg *config.Config, ownStatus bool) (e *Engine, err error) {
	e = &Engine{Cfg: cfg, cmds: make(chan command, 128), stopped: make(chan struct{}), EpFD: -1, StatusFD: -1,
		ByFD: map[int32]*QP{}, Bells: map[int32]*Session{}, Sessions: map[uint64]*Session{}, idle: newIdler(cfg)}
	defer func() {
		if err != nil {
			e.closeResources()
		}
	}()
	if e.wake, err = eventfd.New(true); err != nil {
		return nil, err
	}
	if e.EpFD, err = unix.EpollCreate1(unix.EPOLL_CLOEXEC); err != nil {
		return nil, fmt.Errorf("verbsd: epoll_create: %w", err)
	}
	if err = unix.EpollCtl(e.EpFD, unix.EPOLL_CTL_ADD, e.wake.FD(), &unix.EpollEvent{Events: unix.EPOLLIN, Fd: int32(e.wake.FD())}); err != nil {
		return nil, fmt.Errorf("verbsd: epoll_ctl: %w", err)
	}
	if !ownStatus {
		return e, nil
	}
	if err = e.makeStatusPage(); err != nil {
		return nil, err
	}
	return e, nil
}

// makeStatusPage creates the status page memfd. Besides the seals
// shm.Map checks (no shrink, no grow), it is sealed against future writable
// mappings (F_SEAL_FUTURE_WRITE), so a client can map it read-only only and
// cannot lie to the other clients about the engine being awake.
func (e *Engine) makeStatusPage() error {
	fd, err := unix.MemfdCreate("iwarpd:status", unix.MFD_CLOEXEC|unix.MFD_ALLOW_SEALING)
	if err != nil {
		return fmt.Errorf("verbsd: status page: %w", err)
	}
	e.StatusFD = fd
	if err := unix.Ftruncate(fd, proto.StatusPageLen); err != nil {
		return fmt.Errorf("verbsd: status page: %w", err)
	}
	mem, err := unix.Mmap(fd, 0, proto.StatusPageLen, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		return fmt.Errorf("verbsd: status page: %w", err)
	}
	e.status = mem
	binary.LittleEndian.PutUint32(mem[proto.OffStatusMagic:], proto.StatusMagic)
	binary.LittleEndian.PutUint16(mem[proto.OffStatusVer:], proto.ABIVersion)
	e.asleep = (*atomic.Uint32)(unsafe.Pointer(&mem[proto.OffStatusAsleep]))
	e.Epoch = (*atomic.Uint32)(unsafe.Pointer(&mem[proto.OffStatusEpoch]))
	seals := unix.F_SEAL_SHRINK | unix.F_SEAL_GROW | unix.F_SEAL_FUTURE_WRITE | unix.F_SEAL_SEAL
	if _, err := unix.FcntlInt(uintptr(fd), unix.F_ADD_SEALS, seals); err != nil {
		return fmt.Errorf("verbsd: sealing the status page: %w", err)
	}
	return nil
}

func (e *Engine) closeResources() {
	if e.status != nil {
		unix.Munmap(e.status)
		e.status = nil
	}
	if e.StatusFD >= 0 {
		unix.Close(e.StatusFD)
		e.StatusFD = -1
	}
	if e.EpFD >= 0 {
		unix.Close(e.EpFD)
		e.EpFD = -1
	}
	e.wake.Close()
}

// Do runs f on the engine goroutine and returns its error. It returns
// ErrEngineStopped, without running f, once the engine has stopped. With
// several engines, f runs on engine 0 while the others are parked
// (rnic/engines.go device.do): commands may change any engine's state.
func (e *Engine) Do(f func() error) error {
	if e.Shared {
		return e.dev.do(f)
	}
	return e.do1(f)
}

// do1 runs f on this engine alone.
func (e *Engine) do1(f func() error) error {
	c := command{f: f, done: make(chan error, 1)}
	select {
	case e.cmds <- c:
	case <-e.stopped:
		return ErrEngineStopped
	}
	e.wake.Signal()
	select {
	case err := <-c.done:
		return err
	case <-e.stopped:
		select {
		case err := <-c.done:
			return err
		default:
			return ErrEngineStopped
		}
	}
}

// stop ends the engine loop and waits for it. Objects still installed are
// released by the loop on its way out.
func (e *Engine) stop() {
	e.do1(func() error { e.Quit = true; return nil })
	<-e.stopped
}

func (e *Engine) runCommands() bool {
	ran := false
	for {
		select {
		case c := <-e.cmds:
			c.done <- GuardedCommand(c.f) // rnic/fault.go
			ran = true
			e.scanAll = true // a command may change any QP (rnic/ready.go)
		default:
			return ran
		}
	}
}

// busyYieldEvery is how long a busy engine that completes nothing keeps
// the CPU before it yields (run).
const busyYieldEvery = time.Millisecond

func schedYield() { unix.RawSyscall(unix.SYS_SCHED_YIELD, 0, 0, 0) }

// run is the engine goroutine.
func (e *Engine) run() {
	runtime.LockOSThread()
	e.pin()             // rnic/engines.go
	e.idle.setSlack()   // rnic/idle.go
	GuardClientMemory() // rnic/fault.go
	defer func() {
		for _, s := range e.Sessions {
			e.TeardownSession(s)
		}
		for _, x := range e.Ext {
			x.CloseAll()
		}
		if !e.Shared {
			e.asleep.Store(0)
		}
		close(e.stopped)
		if e.cpu < 0 {
			// A pinned thread stays locked: it exits with the goroutine
			// rather than serve others on one CPU.
			runtime.UnlockOSThread()
		}
	}()
	lastWork := time.Now()
	lastYield := lastWork
	for !e.Quit {
		work := e.runCommands()
		if e.Quit {
			return
		}
		e.pollFDs(0)
		now := time.Now()
		work = e.guardedPass(now) || work // rnic/fault.go
		for _, x := range e.Ext {         // the transports' own work (a lingering RD port)
			work = x.Service(now) || work
		}
		if work {
			e.workPasses++
			lastWork = now
			// Let a client sharing this CPU run: at once when the pass
			// completed work requests (a client may be polling for them,
			// and will post receives and send credits), else at least
			// every busyYieldEvery — a busy engine would otherwise hold it
			// off for a whole time slice. Yielding after every pass handed
			// the CPU to polling clients while retransmissions, ACKs and
			// held datagrams waited: RD goodput at 1 % loss / none
			// 0.55–0.57× → 0.82–0.84× (iwarp-bench -only loss_rd_0,loss_rd_1,
			// paired runs), ping-pong latency unchanged.
			if e.completed || now.Sub(lastYield) >= busyYieldEvery {
				e.completed = false
				lastYield = now
				e.idle.idle() // rnic/idle.go: a yield, or a short sleep on a contended CPU
			}
			continue
		}
		// The poll window, unless the CPU is contended: then a wake-up
		// (a doorbell, a datagram) gets the engine the CPU sooner than
		// sleeping and polling, which cost a wake-up per sleep
		// (rnic/idle.go).
		if now.Sub(lastWork) < e.Cfg.PollWindow && !e.idle.contended(now) {
			e.idle.idle()
			continue
		}
		// Sleep: announce it, then look once more at everything a client
		// could have published before reading Asleep (Dekker with the
		// client's producer store).
		e.announceSleep() // rnic/engines.go
		if len(e.cmds) > 0 || e.pending() {
			e.announceWake()
			continue
		}
		timeout := e.sleepTimeout(now)
		events := e.pollFDs(timeout)
		if timeout >= 0 {
			e.scanAll = true // a timer or a blocked send (rnic/ready.go)
		}
		e.announceWake()
		e.Epoch.Add(1)
		e.wakeups++
		// A doorbell, a datagram or a command opens the poll window; a
		// timer alone does not: the pass serves it, and the engine
		// sleeps again unless that found work. A rank that owns its
		// socket (rnic/fastpath.go) wakes the engine once per lease only
		// to check it, and a window after each such wake kept both
		// engines polling a fifth of the time beside ranks that need
		// the CPUs.
		if events > 0 {
			lastWork = time.Now()
		}
	}
}

// pollFDs runs epoll_wait with timeout (< 0 = forever) and marks the
// ready QP sockets readable; it drains the wake eventfd. Doorbells
// (rnic/doorbell.go) are edge-triggered and never read: their event is the
// wake-up, and the default case ignores a descriptor that is no QP's. It
// returns the number of events (0: the timeout, or EINTR).
func (e *Engine) pollFDs(timeout time.Duration) int {
	var n int
	var err error
	switch {
	case timeout == 0:
		n, err = RawEpollPoll(e.EpFD, e.events[:]) // rnic/iov.go: never blocks
	case timeout < 0:
		n, err = unix.EpollWait(e.EpFD, e.events[:], -1)
	default:
		n, err = epollWaitFor(e.EpFD, e.events[:], timeout) // rnic/epoll.go
	}
	if err != nil {
		return 0 // EINTR: the loop comes round again
	}
	for _, ev := range e.events[:n] {
		switch ev.Fd {
		case int32(e.wake.FD()):
			e.wake.Drain()
		default:
			if e.extEvent(ev.Fd, ev.Events) { // not a QP's socket (a lingering RD port)
				continue
			}
			if s := e.Bells[ev.Fd]; s != nil {
				for _, q := range s.QPs { // rnic/ready.go: a doorbell names a session
					if q.Eng == e { // rnic/engines.go: this engine's QPs of it
						e.MarkReady(q)
					}
				}
				continue
			}
			if q := e.ByFD[ev.Fd]; q != nil {
				if q.Ops.Event(ev.Events) { // ud/qp.go
					q.Readable = true
					e.MarkReady(q)
				}
			}
		}
	}
	return n
}

// sleepTimeout is how long the engine may sleep (< 0: forever): until the
// earliest timer of a transport (an RD retransmission or probe, a delayed
// ACK, a partial message's expiry) or a lingering port's end, 1 ms when a
// send is blocked on a full socket buffer. Timers are kept to the
// microsecond (epollWaitFor): rounded up to whole milliseconds, as
// epoll_wait takes them, an RD probe due in 300 µs waited 1 ms.
func (e *Engine) sleepTimeout(now time.Time) time.Duration {
	timeout := time.Duration(-1)
	earliest := func(d time.Time) {
		w := max(d.Sub(now), minSleep)
		if timeout < 0 || w < timeout {
			timeout = w
		}
	}
	for _, x := range e.Ext { // a lingering RD port ends
		if d, ok := x.Deadline(); ok {
			earliest(d)
		}
	}
	for _, q := range e.QPs {
		if q.Blocked {
			return time.Millisecond
		}
		if d, ok := q.Ops.Deadline(); ok { // the transport's timers
			earliest(d)
		}
	}
	return timeout
}

// minSleep is the shortest timed sleep: a timer already due is served
// after a short sleep rather than a busy loop.
const minSleep = 10 * time.Microsecond

// pending reports whether some QP has work a client published (the
// re-scan before sleeping), and puts those on the ready list.
func (e *Engine) pending() bool {
	found := false
	for _, q := range e.QPs {
		if q.hasWork() {
			e.MarkReady(q)
			found = true
		}
	}
	return found
}

// pass serves every QP of the ready list (rnic/ready.go) once, round-robin,
// starting one further each pass, then drops the quiescent ones.
func (e *Engine) pass(now time.Time) bool {
	e.Passes++
	if len(e.QPs) == 0 {
		return false
	}
	e.fillReady(now)
	work := false
	n := len(e.ready) // a QP marked ready while serving waits for the next pass
	if n == 0 {
		return false
	}
	e.rr = (e.rr + 1) % n
	for i := range n {
		q := e.ready[(e.rr+i)%n]
		e.Visits++
		e.cur, e.curQP = q.Session, q
		stalled := q.Session.Mem.Stalled()
		if e.serveShared(q, now) { // rnic/engines.go
			work = true
			q.lastWork = now
		}
		if !stalled && q.Session.Mem.Stalled() { // rnic/copier.go: this QP's access ran past the bound
			e.ErrorQP(q, "an access to the client's process memory did not finish within -procmem-stall-timeout "+
				"(a page that does not come); register resident memory or shared buffers (docs/memory-registration.md)")
		}
		e.curQP = nil
		e.releaseStaged() // rnic/stage.go
	}
	e.pruneReady(now)
	return work
}

func (e *Engine) Count(q *QP, c Counter, n int64) {
	e.Stats[c] += n
	if q != nil {
		q.Stats[c] += n
	}
}

// extEvent hands an event on a descriptor that is no QP's to the
// transports and reports whether one took it.
func (e *Engine) extEvent(fd int32, events uint32) bool {
	for _, x := range e.Ext {
		if x.Event(fd, events) {
			return true
		}
	}
	return false
}

// AddQP installs a QP in the engine's polling set.
func (e *Engine) AddQP(q *QP) error {
	if err := unix.EpollCtl(e.EpFD, unix.EPOLL_CTL_ADD, q.FD, &unix.EpollEvent{Events: SockInterest(q), Fd: int32(q.FD)}); err != nil {
		return fmt.Errorf("verbsd: epoll_ctl: %w", err)
	}
	if err := e.bellWatch(q.Session); err != nil { // rnic/engines.go
		unix.EpollCtl(e.EpFD, unix.EPOLL_CTL_DEL, q.FD, nil)
		return err
	}
	q.Ops.Added() // ud/qp.go
	e.dev.nextQPN++
	q.QPN = e.dev.nextQPN
	e.QPs = append(e.QPs, q)
	e.ByFD[int32(q.FD)] = q
	e.MarkReady(q)
	return nil
}

// AddUnpolledQP installs a QP that has no socket to poll yet (an RC QP
// before its connection): it gets its QP number and is served.
func (e *Engine) AddUnpolledQP(q *QP) error {
	if err := e.bellWatch(q.Session); err != nil { // rnic/engines.go
		return err
	}
	e.dev.nextQPN++
	q.QPN = e.dev.nextQPN
	e.QPs = append(e.QPs, q)
	e.MarkReady(q)
	return nil
}

// RemoveQP takes a QP out of the polling set (the caller releases it).
func (e *Engine) RemoveQP(q *QP) {
	q.Ops.Removing() // ud/qp.go: before its socket leaves the epoll set
	unix.EpollCtl(e.EpFD, unix.EPOLL_CTL_DEL, q.FD, nil)
	delete(e.ByFD, int32(q.FD))
	e.unready(q)
	for i, x := range e.QPs {
		if x == q {
			e.QPs = append(e.QPs[:i], e.QPs[i+1:]...)
			e.bellUnwatch(q.Session) // rnic/engines.go
			break
		}
	}
	q.Ops.Removed() // ud/qp.go: its socket may linger (RD)

}
