package integration

import (
	"bytes"
	"errors"
	"fmt"
	"net/netip"
	"testing"
	"time"

	"github.com/iwarpd/iwarpd/ofverbs"
	"golang.org/x/sys/unix"
)

// Traffic between ofverbs endpoints, every byte verified. The functions
// return errors (never t.Fatal) so they can run in background goroutines.
//
// Byte i of message k is (k + i) mod 251, as iwarp-perf does (251 is prime:
// a shifted or stale message never matches). Each endpoint's buffer starts
// with a registered pattern of the largest message plus 251 octets, so
// message k of any size is the slice pattern[k%251:][:size], sent straight
// from registered memory without a fill; receive slots follow.

const patPeriod = 251

// endpoint is one UD QP with its CQs and a registered buffer: the pattern,
// then nslots receive slots of slotSize octets.
type endpoint struct {
	name     string
	ctx      *ofverbs.Context
	pd       *ofverbs.PD
	buf      *ofverbs.Buffer
	mr       *ofverbs.MR
	ch       *ofverbs.CompChannel
	scq, rcq *ofverbs.CQ
	qp       *ofverbs.QP
	pattern  []byte
	slots    []byte
	slotSize int
	nslots   int
	nextSlot int // the slot the next receive completion fills (RQ order)
	attr     ofverbs.DeviceAttr
	wcs      []ofverbs.WC
}

type endpointOpts struct {
	maxMsg  int // largest message sent or received (pattern and slot size)
	nslots  int // receive slots (the receive window)
	sqDepth int
	qkey    uint32 // the QP's Q_Key (0: the daemon's random one)
}

// newEndpoint makes a UD QP in RTS on ctx, with nslots receive slots posted.
func newEndpoint(t *testing.T, name string, ctx *ofverbs.Context, o endpointOpts) *endpoint {
	t.Helper()
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
	}
	if o.sqDepth == 0 {
		o.sqDepth = 256
	}
	e := &endpoint{name: name, ctx: ctx, slotSize: max(o.maxMsg, 64), nslots: o.nslots, wcs: make([]ofverbs.WC, 64)}
	var err error
	e.attr, err = ctx.QueryDevice()
	must(err)
	patLen := o.maxMsg + patPeriod
	e.pd, err = ctx.AllocPD()
	must(err)
	e.buf, err = ctx.AllocBuffer(patLen + o.nslots*e.slotSize)
	must(err)
	mem := e.buf.Bytes()
	e.pattern = mem[:patLen]
	for i := range e.pattern {
		e.pattern[i] = byte(i % patPeriod)
	}
	e.slots = mem[patLen : patLen+o.nslots*e.slotSize]
	e.mr, err = e.pd.RegMR(mem, ofverbs.AccessLocalWrite)
	must(err)
	e.ch, err = ctx.CreateCompChannel()
	must(err)
	e.scq, err = ctx.CreateCQ(2*o.sqDepth, nil)
	must(err)
	e.rcq, err = ctx.CreateCQ(2*max(o.nslots, 1), e.ch)
	must(err)
	e.qp, err = e.pd.CreateQP(ofverbs.QPInitAttr{
		Type: ofverbs.QPTypeUD, SendCQ: e.scq, RecvCQ: e.rcq, QKey: o.qkey,
		Cap: ofverbs.QPCap{MaxSendWR: uint32(o.sqDepth), MaxRecvWR: uint32(max(o.nslots, 1)), MaxSendSGE: 1, MaxRecvSGE: 1,
			MaxInline: uint32(min(64, e.attr.MaxInline))},
	})
	must(err)
	must(e.qp.ModifyState(ofverbs.QPStateInit, ofverbs.QPStateRTR, ofverbs.QPStateRTS))
	for i := range o.nslots {
		must(e.postSlot(i))
	}
	return e
}

func (e *endpoint) slot(i int) []byte { return e.slots[i*e.slotSize : (i+1)*e.slotSize] }

func (e *endpoint) postSlot(i int) error {
	n, err := e.qp.PostRecv([]ofverbs.RecvWR{{ID: uint64(i), SGL: []ofverbs.SGE{e.mr.SGE(e.slot(i))}}})
	if n != 1 {
		return fmt.Errorf("%s: post receive slot %d: %v", e.name, i, err)
	}
	return nil
}

// message returns message k of size octets, inside the pattern.
func (e *endpoint) message(k, size int) []byte {
	off := k % patPeriod
	return e.pattern[off : off+size]
}

func (e *endpoint) ahTo(t *testing.T, to ofverbs.Endpoint) *ofverbs.AH {
	t.Helper()
	ah, err := e.pd.CreateAHTo(to)
	if err != nil {
		t.Fatalf("%s: create AH to %v: %v", e.name, to, err)
	}
	return ah
}

// send posts message k of size octets to ah, signaled, with ID k.
func (e *endpoint) send(ah *ofverbs.AH, k, size int) error {
	wr := ofverbs.SendWR{ID: uint64(k), Opcode: ofverbs.WRSend, AH: ah, Signaled: true}
	if size > 0 {
		wr.SGL = []ofverbs.SGE{e.mr.SGE(e.message(k, size))}
	}
	for tries := 0; ; tries++ {
		n, err := e.qp.PostSend([]ofverbs.SendWR{wr})
		if n == 1 {
			return nil
		}
		if !errors.Is(err, unix.ENOMEM) || tries > 10000 {
			return fmt.Errorf("%s: post send %d: %v", e.name, k, err)
		}
		// Send queue full: reap completions first.
		time.Sleep(50 * time.Microsecond)
	}
}

var errTimeout = errors.New("timed out")

// wait returns the next completion of cq, polling with sched_yield for a
// while and then blocking on the completion channel (if the CQ has one) in
// slices, until timeout.
func (e *endpoint) wait(cq *ofverbs.CQ, timeout time.Duration) (ofverbs.WC, error) {
	deadline := time.Now().Add(scaled(timeout))
	for spins := 0; ; spins++ {
		n, err := cq.Poll(e.wcs[:1])
		if err != nil {
			return ofverbs.WC{}, fmt.Errorf("%s: poll: %w", e.name, err)
		}
		if n == 1 {
			return e.wcs[0], nil
		}
		if err := e.ctx.Err(); err != nil {
			return ofverbs.WC{}, fmt.Errorf("%s: session over: %w", e.name, err)
		}
		if time.Now().After(deadline) {
			return ofverbs.WC{}, fmt.Errorf("%s: no completion within %v: %w", e.name, scaled(timeout), errTimeout)
		}
		if spins < 200 {
			schedYield()
			continue
		}
		ch := cq.Channel()
		if ch == nil {
			time.Sleep(50 * time.Microsecond)
			continue
		}
		if err := cq.ReqNotify(false); err != nil {
			return ofverbs.WC{}, err
		}
		if n, _ := cq.Poll(e.wcs[:1]); n == 1 { // arrived before the arming
			return e.wcs[0], nil
		}
		got, err := ch.GetEventTimeout(min(time.Until(deadline), 100*time.Millisecond))
		if err == nil {
			got.AckEvents(1)
		} else if !errors.Is(err, unix.ETIMEDOUT) {
			return ofverbs.WC{}, fmt.Errorf("%s: get event: %w", e.name, err)
		}
	}
}

// reapSend waits for the send completion of message k.
func (e *endpoint) reapSend(k, size int, timeout time.Duration) error {
	wc, err := e.wait(e.scq, timeout)
	if err != nil {
		return fmt.Errorf("send %d (%d B): %w", k, size, err)
	}
	if wc.Err() != nil || wc.ID != uint64(k) || wc.Opcode != ofverbs.WCSend || wc.ByteLen != uint32(size) {
		return fmt.Errorf("%s: send %d (%d B): completion %+v (%v)", e.name, k, size, wc, wc.Err())
	}
	return nil
}

// check verifies a receive completion against message k of size octets from
// src, and re-posts its slot.
func (e *endpoint) check(wc ofverbs.WC, k, size int, src netip.AddrPort, want []byte) error {
	if err := wc.Err(); err != nil {
		return fmt.Errorf("%s: receive of message %d (%d B): %w", e.name, k, size, err)
	}
	if wc.Opcode != ofverbs.WCRecv || wc.ID != uint64(e.nextSlot) || wc.QPN != e.qp.QPN() ||
		wc.Flags&ofverbs.WCFlagSrcValid == 0 || wc.Src != src {
		return fmt.Errorf("%s: message %d: completion %+v, want slot %d, QPN %d, source %v", e.name, k, wc, e.nextSlot, e.qp.QPN(), src)
	}
	if wc.ByteLen != uint32(size) {
		return fmt.Errorf("%s: message %d: %d octets, want %d (a message lost or reordered?)", e.name, k, wc.ByteLen, size)
	}
	got := e.slot(int(wc.ID))[:size]
	if !bytes.Equal(got, want) {
		i := 0
		for i < size && got[i] == want[i] {
			i++
		}
		return fmt.Errorf("%s: message %d (%d B): octet %d is %#x, want %#x", e.name, k, size, i, got[i], want[i])
	}
	clear(got) // a stale copy must never pass for the next message
	e.nextSlot = (e.nextSlot + 1) % e.nslots
	return e.postSlot(int(wc.ID))
}

// sizeSchedule returns the size of message k: a cycle of the interesting
// sizes, and the largest message every bigEvery messages (0: never).
type sizeSchedule struct {
	cycle    []int
	max      int
	bigEvery int
}

func newSchedule(attr ofverbs.DeviceAttr, bigEvery int) sizeSchedule {
	full := attr.DatagramSize - 18 - 4 // untagged DDP header, CRC trailer
	return sizeSchedule{
		cycle:    []int{0, 1, 63, 1024, full, full + 1, 3*full + 17, 65536, 7},
		max:      int(attr.MaxMsgUD),
		bigEvery: bigEvery,
	}
}

func (s sizeSchedule) size(k int) int {
	if s.bigEvery > 0 && k%s.bigEvery == s.bigEvery-1 {
		return s.max
	}
	return s.cycle[k%len(s.cycle)]
}

// retryable reports whether a lost message of this size may be re-sent:
// only messages of many datagrams, where loopback loss is rare but possible
// (a full socket buffer); everything else must arrive.
func (s sizeSchedule) retryable(size int) bool { return size > 65536 }

// trafficStats counts what a run moved.
type trafficStats struct {
	messages int
	bytes    int64
	retries  int
}

const maxRetries = 5 // per run, for retryable messages only

// pingPong runs rounds round trips between a and b: message k goes a→b and
// is answered by message k of the same size b→a; both verified.
func pingPong(a, b *endpoint, rounds int, sched sizeSchedule, logf func(string, ...any)) (trafficStats, error) {
	var st trafficStats
	ab, err := a.pd.CreateAHTo(b.qp.Endpoint())
	if err != nil {
		return st, err
	}
	defer ab.Close()
	ba, err := b.pd.CreateAHTo(a.qp.Endpoint())
	if err != nil {
		return st, err
	}
	defer ba.Close()
	for k := range rounds {
		size := sched.size(k)
		for _, dir := range [2]struct {
			from, to *endpoint
			ah       *ofverbs.AH
		}{{a, b, ab}, {b, a, ba}} {
			if err := transfer(dir.from, dir.to, dir.ah, k, size, sched, &st, logf); err != nil {
				return st, fmt.Errorf("round %d: %w", k, err)
			}
		}
	}
	return st, nil
}

// transfer sends message k from→to and checks it, re-sending a lost
// retryable message a bounded number of times.
func transfer(from, to *endpoint, ah *ofverbs.AH, k, size int, sched sizeSchedule, st *trafficStats, logf func(string, ...any)) error {
	for attempt := 0; ; attempt++ {
		if err := from.send(ah, k, size); err != nil {
			return err
		}
		if err := from.reapSend(k, size, 10*time.Second); err != nil {
			return err
		}
		timeout := 10 * time.Second
		if sched.retryable(size) {
			timeout = 3 * time.Second
		}
		wc, err := to.wait(to.rcq, timeout)
		if errors.Is(err, errTimeout) && sched.retryable(size) && st.retries < maxRetries {
			st.retries++
			logf("message %d (%d B) %v→%v lost (attempt %d), re-sending", k, size, from.qp.Addr(), to.qp.Addr(), attempt+1)
			continue
		}
		if err != nil {
			return fmt.Errorf("message %d (%d B): %w", k, size, err)
		}
		if err := to.check(wc, k, size, from.qp.Addr(), from.message(k, size)); err != nil {
			return err
		}
		st.messages++
		st.bytes += int64(size)
		return nil
	}
}

// stream sends n messages from→to, never more than to's receive window
// ahead of the receives it has posted (the credits), and verifies each
// in order. A retryable (large) message is sent only when everything before
// it has arrived, so that its loss can be told apart and it can be re-sent.
func stream(from, to *endpoint, n int, sched sizeSchedule, logf func(string, ...any)) (trafficStats, error) {
	var st trafficStats
	ah, err := from.pd.CreateAHTo(to.qp.Endpoint())
	if err != nil {
		return st, err
	}
	defer ah.Close()
	window := to.nslots
	sqDepth := int(from.qp.Cap().MaxSendWR)
	sent, recvd, inflight := 0, 0, 0 // inflight: sends not yet reaped
	var bigSent time.Time            // when the pending retryable message went out
	lastProgress := time.Now()
	wcs := make([]ofverbs.WC, 32)
	for recvd < n {
		progress := false
		// Send while credits and send queue room last.
		for sent < n && sent-recvd < window && inflight < sqDepth {
			size := sched.size(sent)
			if sent != recvd && (sched.retryable(size) || sched.retryable(sched.size(sent-1))) {
				break // a retryable message travels alone
			}
			if err := from.send(ah, sent, size); err != nil {
				return st, err
			}
			if sched.retryable(size) {
				bigSent = time.Now()
			}
			sent++
			inflight++
			progress = true
		}
		// Reap sends.
		got, err := from.scq.Poll(wcs)
		if err != nil {
			return st, err
		}
		for _, wc := range wcs[:got] {
			if wc.Err() != nil || wc.Opcode != ofverbs.WCSend {
				return st, fmt.Errorf("%s: send completion %+v (%v)", from.name, wc, wc.Err())
			}
		}
		inflight -= got
		progress = progress || got > 0
		// Check receives, in order.
		got, err = to.rcq.Poll(wcs)
		if err != nil {
			return st, err
		}
		for _, wc := range wcs[:got] {
			size := sched.size(recvd)
			if err := to.check(wc, recvd, size, from.qp.Addr(), from.message(recvd, size)); err != nil {
				return st, err
			}
			recvd++
			st.messages++
			st.bytes += int64(size)
		}
		progress = progress || got > 0
		if progress {
			lastProgress = time.Now()
			continue
		}
		// A lone retryable message that did not arrive: re-send it.
		if sent == recvd+1 && sched.retryable(sched.size(recvd)) && time.Since(bigSent) > scaled(3*time.Second) {
			if st.retries >= maxRetries {
				return st, fmt.Errorf("message %d (%d B) lost, and %d retries already spent", recvd, sched.size(recvd), st.retries)
			}
			st.retries++
			logf("stream message %d (%d B) lost, re-sending", recvd, sched.size(recvd))
			sent--
			continue
		}
		if time.Since(lastProgress) > scaled(10*time.Second) {
			return st, fmt.Errorf("stream stalled: sent %d, received %d of %d, %d sends unreaped: %w", sent, recvd, n, inflight, errTimeout)
		}
		if err := from.ctx.Err(); err != nil {
			return st, err
		}
		schedYield()
		if time.Since(lastProgress) > time.Millisecond {
			time.Sleep(50 * time.Microsecond)
		}
	}
	// Reap the last sends.
	for inflight > 0 {
		wc, err := from.wait(from.scq, 10*time.Second)
		if err != nil {
			return st, err
		}
		if wc.Err() != nil {
			return st, fmt.Errorf("%s: send completion %+v (%v)", from.name, wc, wc.Err())
		}
		inflight--
	}
	return st, nil
}

// schedYield gives the CPU to another runnable thread (sched_yield(2)): on
// a small machine the daemons need it more than our polling does.
func schedYield() { unix.RawSyscall(unix.SYS_SCHED_YIELD, 0, 0, 0) }
