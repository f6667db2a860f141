package rnic

import (
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/iwarpd/iwarpd/proto"
	"github.com/iwarpd/iwarpd/verbsd/config"
	"golang.org/x/sys/unix"
)

// Engines per core (docs/engines.md). With Config.Engines
// = N > 1 the device runs N engines, each a goroutine locked to an OS thread
// pinned to one CPU, each owning the QPs placed on it: their sockets (its
// epoll set), rings, timers and ready list. What QPs of different engines
// share is made safe by one mechanism each:
//
//   - Control commands (Do) run on engine 0 while every other engine is
//     parked between two passes (device.do): the session tables (PDs, MRs,
//     keys, CQs, SRQs, QPs), placement and every engine's QP set change only
//     when no pass runs anywhere, so a pass reads them without locks.
//   - A CQ is produced into under its own mutex (cq.mu, PostCQE): the
//     completions of one QP come from its one engine in order; those of
//     different QPs interleave whole.
//   - An SRQ is consumed under its own mutex (srq.mu), held for the whole
//     service of a QP using it (a UD pass looks ahead at several receives
//     before it consumes them).
//   - The status page's Asleep word is 1 while any engine sleeps (the
//     count of sleepers is kept under device.sleepMu); a session's doorbell
//     is in the epoll set of engine 0 and of every engine owning one of its
//     QPs (only those), so a ring wakes every engine that may have the post
//     to serve and no other.
//
// With N = 1 none of this runs: one engine, unpinned, as before.

// Device is what the engines of one server share.
type Device struct {
	Engs []*Engine
	// mu serializes control commands (do): one at a time parks the others.
	mu sync.Mutex
	// nextQPN numbers QPs device-wide (commands only).
	nextQPN uint32
	// sleepers counts the engines between announcing sleep and waking;
	// Asleep is 1 while it is not zero (announceSleep).
	sleepMu  sync.Mutex
	sleepers int
	start    time.Time

	// What every session shares.
	Cfg   *config.Config
	Log   config.Logger
	Users UserTable // per-user resource counts (rnic/userlimits.go)
	// Strikes: process-memory stalls per user (rnic/procstrike.go).
	Strikes StrikeTable
	nextID  atomic.Uint64 // session ids
	Port    atomic.Uint32 // datagram port scan cursor (BindDgram)
	// UnprivStart is ip_unprivileged_port_start at start (rnic/bind.go).
	UnprivStart uint16
	// EventLog rate-limits the info lines clients and peers cause:
	// sessions, RC connection failures, RD peers declared dead
	// (rnic/loglimit.go).
	EventLog LogLimiter
	// LimitLog rate-limits the warnings of requests a configured limit
	// refused (verbsd/session_serve.go): a bucket of its own, so that
	// session churn does not hide them, nor they the session lines.
	LimitLog LogLimiter
	// netns: the daemon's network namespace cookie; reserved: ports kept
	// for client-made QP sockets (rnic/qpsock.go).
	netns    netnsCookie
	reserved reservations
}

// NewDevice makes cfg.Engines engines (at least one); engine 0 makes the
// status page, the others write the same words.
func NewDevice(cfg *config.Config) (*Device, error) {
	n := max(cfg.Engines, 1)
	d := &Device{start: time.Now(), Cfg: cfg, Log: config.NopLogger{},
		EventLog: LogLimiter{Burst: eventLogBurst, Every: eventLogEvery},
		LimitLog: LogLimiter{Burst: eventLogBurst, Every: eventLogEvery}}
	cpus := AllowedCPUs()
	for i := range n {
		e, err := newEngine(cfg, i == 0)
		if e != nil {
			d.Engs = append(d.Engs, e)
		}
		if err != nil {
			d.CloseResources()
			return nil, err
		}
		e.ID, e.dev, e.Shared, e.cpu = i, d, n > 1, -1
		if n > 1 && len(cpus) > 0 {
			e.cpu = cpus[i%len(cpus)]
		}
		if i > 0 {
			e0 := d.Engs[0]
			e.asleep, e.Epoch = e0.asleep, e0.Epoch // engine 0 owns the page
		}
	}
	return d, nil
}

// AllowedCPUs lists the CPUs this process may run on (sched_getaffinity):
// engine i is pinned to the (i mod len)-th of them.
func AllowedCPUs() []int {
	var set unix.CPUSet
	if err := unix.SchedGetaffinity(0, &set); err != nil {
		return nil
	}
	var cpus []int
	for c := range 1024 {
		if set.IsSet(c) {
			cpus = append(cpus, c)
		}
	}
	return cpus
}

func (d *Device) Run() {
	for _, e := range d.Engs {
		go e.run()
	}
}

// Stop stops every engine (engine 0 last: it owns the sessions' teardown).
func (d *Device) Stop() {
	for i := len(d.Engs) - 1; i >= 0; i-- {
		d.Engs[i].stop()
	}
}

func (d *Device) CloseResources() {
	for _, e := range d.Engs {
		e.closeResources()
	}
}

// do runs f on engine 0 with every other engine parked in its command loop
// (between two passes), so that f may change any engine's state. Engines
// that have stopped are not waited for.
func (d *Device) do(f func() error) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	release := make(chan struct{})
	defer close(release)
	parked := make(chan struct{}, len(d.Engs))
	var waiting []*Engine
	for _, o := range d.Engs[1:] {
		c := command{f: func() error { parked <- struct{}{}; <-release; return nil }, done: make(chan error, 1)}
		select {
		case o.cmds <- c:
			o.wake.Signal()
			waiting = append(waiting, o)
		case <-o.stopped:
		}
	}
	for _, o := range waiting {
		select {
		case <-parked:
		case <-o.stopped:
		}
	}
	return d.Engs[0].do1(f)
}

// Place picks the engine of a new QP: the one with the fewest QPs, the
// lowest id on a tie (spread). Runs inside a command.
func (d *Device) Place() *Engine {
	best := d.Engs[0]
	for _, e := range d.Engs[1:] {
		if len(e.QPs) < len(best.QPs) {
			best = e
		}
	}
	return best
}

// announceSleep stores Asleep = 1 before the engine re-scans its QPs and
// sleeps (Dekker with the client's post: engine.run).
func (e *Engine) announceSleep() {
	if !e.Shared {
		e.asleep.Store(1)
		return
	}
	d := e.dev
	d.sleepMu.Lock()
	d.sleepers++
	e.asleep.Store(1)
	d.sleepMu.Unlock()
}

// announceWake undoes announceSleep: Asleep goes back to 0 when no engine
// sleeps any more.
func (e *Engine) announceWake() {
	if !e.Shared {
		e.asleep.Store(0)
		return
	}
	d := e.dev
	d.sleepMu.Lock()
	d.sleepers--
	if d.sleepers == 0 {
		e.asleep.Store(0)
	}
	d.sleepMu.Unlock()
}

// pin locks the engine's thread to its CPU (N > 1 only). A failure is
// logged, not fatal: the engine then runs wherever the kernel puts it.
func (e *Engine) pin() {
	e.tid = unix.Gettid()
	if e.cpu < 0 {
		return
	}
	var set unix.CPUSet
	set.Set(e.cpu)
	if err := unix.SchedSetaffinity(0, &set); err != nil && e.Cfg.Log != nil {
		e.Cfg.Log.Warnf("engine %d: cannot pin its thread to CPU %d (%v); it runs unpinned — check the daemon's CPU affinity (taskset, systemd CPUAffinity=)", e.ID, e.cpu, err)
		e.cpu = -1
	}
}

// threadCPUTime is the CPU time the engine's thread has used
// (clock_gettime(2) on the thread's CPU clock, as pthread_getcpuclockid(3)
// makes it: ((~tid) << 3) | CPUCLOCK_PERTHREAD | CPUCLOCK_SCHED).
func (e *Engine) threadCPUTime() time.Duration {
	if e.tid == 0 {
		return 0
	}
	var ts unix.Timespec
	if err := unix.ClockGettime(int32(^uint32(e.tid)<<3|6), &ts); err != nil {
		return 0
	}
	return time.Duration(ts.Nano())
}

// EngineInfo is what iwarpctl shows of an engine. Runs inside a command.
func (e *Engine) EngineInfo() proto.EngineInfo {
	return proto.EngineInfo{ID: e.ID, CPU: e.cpu, QPs: len(e.QPs), Passes: int64(e.Passes), WorkPasses: int64(e.workPasses),
		Wakeups: int64(e.wakeups), CPUTimeNS: int64(e.threadCPUTime()), UptimeNS: int64(time.Since(e.dev.start))}
}

// bellWatch adds the session's doorbell to e's epoll set when e gets its
// first QP of s (with one engine, it watches every doorbell from hello on).
func (e *Engine) bellWatch(s *Session) error {
	if !e.Shared || s.Bell < 0 {
		return nil
	}
	if s.bellRefs == nil {
		s.bellRefs = map[*Engine]int{}
	}
	if s.bellRefs[e] == 0 {
		ev := unix.EpollEvent{Events: unix.EPOLLIN | unix.EPOLLET, Fd: int32(s.Bell)}
		if err := unix.EpollCtl(e.EpFD, unix.EPOLL_CTL_ADD, s.Bell, &ev); err != nil {
			return fmt.Errorf("verbsd: engine %d: epoll_ctl (doorbell): %w", e.ID, err)
		}
		e.Bells[int32(s.Bell)] = s
	}
	s.bellRefs[e]++
	return nil
}

// bellUnwatch undoes bellWatch when e loses its last QP of s.
func (e *Engine) bellUnwatch(s *Session) {
	if !e.Shared || s.Bell < 0 || s.bellRefs[e] == 0 {
		return
	}
	s.bellRefs[e]--
	if s.bellRefs[e] == 0 {
		delete(s.bellRefs, e)
		unix.EpollCtl(e.EpFD, unix.EPOLL_CTL_DEL, s.Bell, nil)
		delete(e.Bells, int32(s.Bell))
	}
}

// serveShared serves q (QPOps.Service) with what sharing across engines asks:
// the SRQ held for the whole service, a CQ overrun seen by another engine
// applied, a session whose memory faulted left alone (its teardown is a
// command: failFaulted). With one engine it is QPOps.Service.
func (e *Engine) serveShared(q *QP, now time.Time) bool {
	if !e.Shared {
		return q.Ops.Service(now)
	}
	if q.Session.faulted.Load() {
		return false
	}
	if q.cqOverran.Swap(false) {
		e.ErrorQP(q, "its completion queue overran")
	}
	if x := q.SRQ; x != nil {
		x.mu.Lock()
		defer x.mu.Unlock()
	}
	return q.Ops.Service(now)
}

// hasWork reports whether the client published work the engine must act
// on now (QPOps.HasWork), reading a shared SRQ under its mutex.
func (q *QP) hasWork() bool {
	if q.Session.faulted.Load() {
		return false
	}
	if x := q.SRQ; x != nil && q.Eng != nil && q.Eng.Shared {
		x.mu.Lock()
		defer x.mu.Unlock()
	}
	return q.Ops.HasWork()
}
