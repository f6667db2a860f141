package ofverbs

import (
	"errors"
	"sync"
	"sync/atomic"
	"time"

	"github.com/iwarpd/iwarpd/internal/eventfd"
	"github.com/iwarpd/iwarpd/internal/shm"
	"github.com/iwarpd/iwarpd/proto"
	"golang.org/x/sys/unix"
)

// CompChannel is a completion channel: it tells a thread that armed CQs
// (CQ.ReqNotify) have new completions. One channel may serve many CQs.
type CompChannel struct {
	ctx    *Context
	handle uint32
	efd    *eventfd.EventFD // the daemon signals it; non-blocking
	quit   *eventfd.EventFD // signalled by Close to wake GetEvent

	mu      sync.Mutex // guards cqs, pending and the CQs' armed flags
	cqs     []*CQ
	pending []*CQ // CQs whose event fired and was not yet returned
	waiters sync.WaitGroup
	gone    bool // released: no new GetEvent

	closeMu sync.Mutex
	closed  atomic.Bool
}

// CreateCompChannel creates a completion channel.
func (c *Context) CreateCompChannel() (*CompChannel, error) {
	const op = "create-comp-channel"
	efd, err := eventfd.New(true)
	if err != nil {
		return nil, &Error{Op: op, Errno: errnoOf(err, unix.EMFILE), Msg: err.Error()}
	}
	quit, err := eventfd.New(true)
	if err != nil {
		efd.Close()
		return nil, &Error{Op: op, Errno: errnoOf(err, unix.EMFILE), Msg: err.Error()}
	}
	var h proto.Handle
	if err := c.call(proto.OpCreateCompChannel, proto.CreateCompChannelRequest{}, &h, efd.FD()); err != nil {
		efd.Close()
		quit.Close()
		return nil, err
	}
	ch := &CompChannel{ctx: c, handle: h.Handle, efd: efd, quit: quit}
	c.mu.Lock()
	c.channels[ch] = struct{}{}
	c.mu.Unlock()
	return ch, nil
}

// FD returns the channel's descriptor, for epoll users: it becomes readable
// when an event may be waiting; then call GetEvent.
func (ch *CompChannel) FD() int { return ch.efd.FD() }

// GetEvent blocks until an armed CQ bound to the channel has a completion
// event, and returns that CQ (which is disarmed: call ReqNotify again). It
// returns an error wrapping unix.ENODEV when the session ends, and one
// wrapping unix.EINVAL if the channel is closed meanwhile.
func (ch *CompChannel) GetEvent() (*CQ, error) { return ch.getEvent(-1) }

// GetEventTimeout is GetEvent giving up after d with an error wrapping
// unix.ETIMEDOUT.
func (ch *CompChannel) GetEventTimeout(d time.Duration) (*CQ, error) {
	if d < 0 {
		d = 0
	}
	return ch.getEvent(int((d + time.Millisecond - 1) / time.Millisecond))
}

func (ch *CompChannel) getEvent(timeoutMs int) (*CQ, error) {
	const op = "get-cq-event"
	ch.mu.Lock()
	if ch.gone {
		ch.mu.Unlock()
		return nil, ch.closedErr(op)
	}
	ch.waiters.Add(1)
	ch.mu.Unlock()
	defer ch.waiters.Done()

	var deadline time.Time
	if timeoutMs >= 0 {
		deadline = time.Now().Add(time.Duration(timeoutMs) * time.Millisecond)
	}
	fds := []unix.PollFd{
		{Fd: int32(ch.efd.FD()), Events: unix.POLLIN},
		{Fd: int32(ch.quit.FD()), Events: unix.POLLIN},
		{Fd: int32(ch.ctx.wake.FD()), Events: unix.POLLIN},
	}
	for {
		ch.mu.Lock()
		if len(ch.pending) > 0 {
			cq := ch.pending[0]
			ch.pending = ch.pending[1:]
			ch.mu.Unlock()
			cq.events.Add(1)
			return cq, nil
		}
		ch.mu.Unlock()
		wait := -1
		if timeoutMs >= 0 {
			wait = int(time.Until(deadline) / time.Millisecond)
			if wait < 0 {
				wait = 0
			}
		}
		for i := range fds {
			fds[i].Revents = 0
		}
		n, err := unix.Poll(fds, wait)
		if errors.Is(err, unix.EINTR) {
			continue
		}
		if err != nil {
			return nil, &Error{Op: op, Errno: errnoOf(err, unix.EIO), Msg: err.Error()}
		}
		if fds[0].Revents != 0 {
			if _, err := ch.efd.Drain(); err != nil {
				return nil, &Error{Op: op, Errno: errnoOf(err, unix.EIO), Msg: err.Error()}
			}
			ch.scan()
			continue
		}
		if fds[1].Revents != 0 || fds[2].Revents != 0 {
			return nil, ch.closedErr(op)
		}
		if n == 0 && timeoutMs >= 0 && !time.Now().Before(deadline) {
			return nil, newError(op, unix.ETIMEDOUT, "no completion event within %d ms", timeoutMs)
		}
	}
}

// closedErr is the error of GetEvent on a channel that is closed or whose
// session ended: ENODEV for the latter, EINVAL for the former.
func (ch *CompChannel) closedErr(op string) error {
	if err := ch.ctx.sessionErr(op); err != nil {
		return err
	}
	return closedError(op, "completion channel")
}

// scan moves every CQ whose arming the daemon consumed to pending.
func (ch *CompChannel) scan() {
	ch.mu.Lock()
	defer ch.mu.Unlock()
	for _, cq := range ch.cqs {
		if cq.armed && cq.ring.Arm().Load() == proto.ArmNone {
			cq.armed = false
			ch.pending = append(ch.pending, cq)
		}
	}
}

// Close destroys the channel (the daemon refuses with EBUSY while CQs use
// it); a blocked GetEvent returns. Idempotent.
func (ch *CompChannel) Close() error {
	ch.closeMu.Lock()
	defer ch.closeMu.Unlock()
	if ch.closed.Load() {
		return nil
	}
	if err := ch.ctx.destroy(proto.OpDestroyCompChannel, ch.handle); err != nil {
		return err
	}
	ch.ctx.mu.Lock()
	delete(ch.ctx.channels, ch)
	ch.ctx.mu.Unlock()
	ch.release()
	return nil
}

func (ch *CompChannel) release() {
	ch.mu.Lock()
	if ch.gone {
		ch.mu.Unlock()
		return
	}
	ch.gone = true
	ch.mu.Unlock()
	ch.closed.Store(true)
	ch.quit.Signal()
	ch.waiters.Wait()
	ch.efd.Close()
	ch.quit.Close()
}

// CQ is a completion queue: a ring in shared memory the daemon fills and
// Poll empties.
type CQ struct {
	ctx    *Context
	handle uint32
	ch     *CompChannel
	depth  uint32

	mu     sync.Mutex // Poll, ReqNotify, release
	region *shm.Region
	ring   *shm.Ring
	cons   *shm.Consumer
	armed  bool // guarded by ch.mu: armed by ReqNotify, event not yet seen

	events atomic.Uint64 // returned by GetEvent
	acked  atomic.Uint64 // AckEvents

	closeMu sync.Mutex
	closed  atomic.Bool
}

// roundDepth rounds n up to a power of two within proto.MaxDepth.
func roundDepth(n int) (uint32, bool) {
	if n <= 0 || n > proto.MaxDepth {
		return 0, false
	}
	d := uint32(1)
	for int(d) < n {
		d <<= 1
	}
	return d, true
}

// CreateCQ creates a completion queue of at least depth entries (rounded up
// to a power of two), bound to ch if not nil.
func (c *Context) CreateCQ(depth int, ch *CompChannel) (*CQ, error) {
	const op = "create-cq"
	d, ok := roundDepth(depth)
	if !ok {
		return nil, newError(op, unix.EINVAL, "depth %d (want 1..%d)", depth, proto.MaxDepth)
	}
	var chHandle uint32
	if ch != nil {
		if ch.ctx != c || ch.closed.Load() {
			return nil, newError(op, unix.EINVAL, "completion channel closed or of another context")
		}
		chHandle = ch.handle
	}
	reg, err := shm.Create("cq", proto.RingBytes(d, proto.CQESize))
	if err != nil {
		return nil, &Error{Op: op, Errno: errnoOf(err, unix.ENOMEM), Msg: err.Error()}
	}
	ring, err := shm.NewRing(reg.Mem, proto.RingCQ, d, proto.CQESize, true)
	if err != nil {
		reg.Close()
		return nil, &Error{Op: op, Errno: unix.EINVAL, Msg: err.Error()}
	}
	var h proto.Handle
	if err := c.call(proto.OpCreateCQ, proto.CreateCQRequest{Depth: d, Channel: chHandle}, &h, reg.FD()); err != nil {
		reg.Close()
		return nil, err
	}
	cq := &CQ{ctx: c, handle: h.Handle, ch: ch, depth: d, region: reg, ring: ring, cons: shm.NewConsumer(ring)}
	c.mu.Lock()
	c.cqs[cq.handle] = cq
	c.mu.Unlock()
	if ch != nil {
		ch.mu.Lock()
		ch.cqs = append(ch.cqs, cq)
		ch.mu.Unlock()
	}
	return cq, nil
}

// Depth returns the number of entries.
func (cq *CQ) Depth() int { return int(cq.depth) }

// Handle returns the daemon's handle of the CQ.
func (cq *CQ) Handle() uint32 { return cq.handle }

// Channel returns the completion channel, or nil.
func (cq *CQ) Channel() *CompChannel { return cq.ch }

// Poll moves up to len(wcs) completions into wcs and returns how many. It
// never blocks and never allocates. Safe for concurrent use.
func (cq *CQ) Poll(wcs []WC) (int, error) {
	cq.mu.Lock()
	defer cq.mu.Unlock()
	if cq.cons == nil {
		return 0, closedError("poll-cq", "completion queue")
	}
	n := 0
	var e proto.CQE
	for n < len(wcs) {
		slot, err := cq.cons.Peek()
		if err != nil {
			cq.cons.Release()
			return n, &Error{Op: "poll-cq", Errno: unix.EIO, Msg: err.Error()}
		}
		if slot == nil {
			break
		}
		proto.GetCQE(slot, &e)
		cq.cons.Advance()
		wcs[n] = WC{ID: e.WRID, Status: e.Status, Opcode: e.Opcode, Flags: e.Flags, ByteLen: e.ByteLen,
			QPN: e.QPN, InvStag: e.InvStag, Src: e.Src, Term: e.Term, TO: e.TO, Imm: e.Imm}
		n++
	}
	cq.cons.Release()
	return n, nil
}

// Overrun reports whether the daemon found the CQ full when it had to post
// a completion (the QPs using it were moved to the Error state).
func (cq *CQ) Overrun() bool {
	cq.mu.Lock()
	defer cq.mu.Unlock()
	return cq.ring != nil && cq.ring.Overrun().Load() != 0
}

// ReqNotify arms the CQ: the next completion (solicitedOnly: the next
// solicited receive or error completion) produces one event on the CQ's
// completion channel. It is a store into shared memory, no system call.
func (cq *CQ) ReqNotify(solicitedOnly bool) error {
	const op = "req-notify-cq"
	if cq.ch == nil {
		return newError(op, unix.EINVAL, "the CQ has no completion channel")
	}
	v := proto.ArmNext
	if solicitedOnly {
		v = proto.ArmSolicited
	}
	cq.mu.Lock()
	defer cq.mu.Unlock()
	if cq.ring == nil {
		return closedError(op, "completion queue")
	}
	ch := cq.ch
	ch.mu.Lock()
	arm := cq.ring.Arm()
	if cq.armed && arm.Load() == proto.ArmNone {
		// The previous arming fired and nobody has collected it yet:
		// keep that event.
		ch.pending = append(ch.pending, cq)
	}
	cq.armed = true
	arm.Store(v)
	ch.mu.Unlock()
	return nil
}

// AckEvents acknowledges n events returned by GetEvent for this CQ
// (bookkeeping, as in libibverbs; nothing waits for it).
func (cq *CQ) AckEvents(n int) {
	if n > 0 {
		cq.acked.Add(uint64(n))
	}
}

// UnackedEvents returns how many events GetEvent returned for this CQ that
// were not acknowledged.
func (cq *CQ) UnackedEvents() uint64 { return cq.events.Load() - cq.acked.Load() }

// Close destroys the CQ (the daemon refuses with EBUSY while QPs use it).
// Idempotent.
func (cq *CQ) Close() error {
	cq.closeMu.Lock()
	defer cq.closeMu.Unlock()
	if cq.closed.Load() {
		return nil
	}
	if err := cq.ctx.destroy(proto.OpDestroyCQ, cq.handle); err != nil {
		return err
	}
	cq.ctx.mu.Lock()
	delete(cq.ctx.cqs, cq.handle)
	cq.ctx.mu.Unlock()
	cq.release()
	return nil
}

func (cq *CQ) release() {
	cq.mu.Lock()
	defer cq.mu.Unlock()
	cq.closed.Store(true)
	if cq.region == nil {
		return
	}
	if ch := cq.ch; ch != nil {
		ch.mu.Lock()
		ch.cqs = removeCQ(ch.cqs, cq)
		ch.pending = removeCQ(ch.pending, cq)
		ch.mu.Unlock()
	}
	cq.region.Close()
	cq.region, cq.ring, cq.cons = nil, nil, nil
}

func removeCQ(list []*CQ, cq *CQ) []*CQ {
	out := list[:0]
	for _, x := range list {
		if x != cq {
			out = append(out, x)
		}
	}
	clear(list[len(out):])
	return out
}
