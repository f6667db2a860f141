package rnic

import (
	"encoding/binary"
	"fmt"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/iwarpd/iwarpd/proto"
	"golang.org/x/sys/unix"
)

// The fast path's hand-over of a datagram QP's socket
// (docs/design-small-messages.md "Security: a socket in the client's
// hands", docs/fastpath.md; the page: proto/fastpath.go). The rank reads
// its QP's socket itself while it polls and renews its lease; the engine
// does not read it then (the socket is out of its epoll interest: ud), it
// only sends on it (MSG_DONTWAIT, as on every client-made socket). Once
// the lease is older than -fastpath-lease the engine takes the socket
// over by compare-and-swap of Owner, and reads it only once it has seen
// Busy clear after that (Dekker with the rank's store of Busy and load of
// Owner: a full barrier on both sides, so one of the two sees the other).
// It gives the socket back at the end of the QP's service when the rank
// set Want, after the completions of what it read. It never waits for
// Busy: it looks again later (fpRetryMin, doubling up to the lease).
//
// Everything in the page is the client's: an Owner of neither value, or
// the rank's value while the engine owns the socket, fails the QP (the
// fast path ends: the engine reads as before); a Busy never cleared or a
// Lease always fresh stalls only this QP's reception; a Lease in the
// future beyond proto.FPLeaseSkew counts as expired.

// Fastpath is a QP's fast-path page as the engine sees it (engine-owned).
type Fastpath struct {
	m                              *Mapping
	owner, busy, want              *atomic.Uint32
	lease                          *atomic.Int64
	takeovers, handbacks, releases *atomic.Uint64

	state   fpState
	retryAt time.Time     // fpPending: when to look at Busy again
	retry   time.Duration // the next wait after that
	off     bool          // a violation ended the fast path: the engine reads as before
	flags   uint16        // the page's Flags at the hand-over (proto.FPFlag*)
	reclaim bool          // take the socket over at the next service, lease or not (FastpathReclaim)
	groOff  bool          // UDP_GRO must go off, over an empty queue, before the first hand-back (fastpath_gro.go)
}

type fpState uint8

const (
	fpDaemon  fpState = iota // the engine owns the socket and saw Busy clear
	fpPending                // the engine owns it (take-over, release), Busy not yet seen clear
	fpRank                   // the rank owns it: the engine does not read it
)

// fpRetryMin is the first wait before the engine looks at Busy again.
const fpRetryMin = 20 * time.Microsecond

// NewFastpath maps the client's page (descriptor fd, taken over: closed
// on error) and checks its Magic and Version; the engine owns the socket
// at first. It is installed by the engine (SetFastpath).
func NewFastpath(fd int) (*Fastpath, error) { return NewFastpathLen(fd, proto.FastpathPageLen) }

// NewFastpathLen is NewFastpath for a page of n octets
// (proto.FastpathPageLenOf: an RD QP's page carries its RD halves).
func NewFastpathLen(fd, n int) (*Fastpath, error) {
	m, err := MapRegion(fd, 0, uint64(n))
	if err != nil {
		return nil, err
	}
	b := m.Mem
	if mg, v := binary.LittleEndian.Uint32(b[proto.OffFPMagic:]), binary.LittleEndian.Uint16(b[proto.OffFPVersion:]); mg != proto.FastpathMagic || v != proto.FastpathVersion {
		m.Close()
		return nil, Errf(unix.EINVAL, "fastpath-page: the page's magic %#x / version %d are not \"IWFP\" / %d: write them before the hand-over (proto/fastpath.go)",
			mg, v, proto.FastpathVersion)
	}
	u32 := func(off int) *atomic.Uint32 { return (*atomic.Uint32)(unsafe.Pointer(&b[off])) }
	u64 := func(off int) *atomic.Uint64 { return (*atomic.Uint64)(unsafe.Pointer(&b[off])) }
	f := &Fastpath{m: m, owner: u32(proto.OffFPOwner), busy: u32(proto.OffFPBusy), want: u32(proto.OffFPWant),
		lease: (*atomic.Int64)(unsafe.Pointer(&b[proto.OffFPLease])), takeovers: u64(proto.OffFPTakeovers),
		handbacks: u64(proto.OffFPHandbacks), releases: u64(proto.OffFPReleases), state: fpDaemon,
		flags: binary.LittleEndian.Uint16(b[proto.OffFPFlags:])}
	f.want.Store(0)
	f.takeovers.Store(0)
	f.handbacks.Store(0)
	f.releases.Store(0)
	f.owner.Store(proto.FPOwnerDaemon)
	return f, nil
}

// GRO reports whether the rank reads its socket with UDP_GRO on
// (proto.FPFlagGRO, read at the hand-over of the page).
func (f *Fastpath) GRO() bool { return f.flags&proto.FPFlagGRO != 0 }

// Close unmaps the page (CloseQP).
func (f *Fastpath) Close() {
	if f != nil {
		f.m.Close()
	}
}

// DaemonReads reports whether the engine reads q's own socket: no page,
// the fast path ended, or the engine owns it and saw Busy clear.
func (q *QP) DaemonReads() bool {
	f := q.FP
	return f == nil || f.off || f.state == fpDaemon
}

// FastpathOwner is who reads q's socket, for iwarpctl: "" (no page),
// "rank", "daemon", "taking" (taken over, the rank's Busy not yet seen
// clear) or "off" (ended by a violation).
func (q *QP) FastpathOwner() string {
	f := q.FP
	switch {
	case f == nil:
		return ""
	case f.off:
		return "off"
	case f.state == fpRank:
		return "rank"
	case f.state == fpPending:
		return "taking"
	}
	return "daemon"
}

// FastpathWanted reports whether the rank asked for q's socket while the
// engine reads it: q has work (the hand-back at the end of its service).
func (q *QP) FastpathWanted() bool {
	f := q.FP
	return f != nil && !f.off && f.state == fpDaemon && f.want.Load() != 0
}

// FastpathReleased reports whether the rank wrote Owner while it owned
// q's socket (a release, or garbage): q has work (the engine follows it).
func (q *QP) FastpathReleased() bool {
	f := q.FP
	return f != nil && !f.off && f.state == fpRank && f.owner.Load() != proto.FPOwnerRank
}

// FastpathDeadline is when the engine must look at q's page again: the
// lease's end while the rank owns the socket, the next look at Busy while
// a take-over waits for it.
func (q *QP) FastpathDeadline(lease time.Duration) (time.Time, bool) {
	f := q.FP
	if f == nil || f.off {
		return time.Time{}, false
	}
	switch f.state {
	case fpRank:
		if q.State == proto.QPStateError || f.reclaim {
			return time.Time{}, true // taken over at once (FastpathBegin)
		}
		l := f.lease.Load()
		if l < 0 || l > MonoNS(time.Now())+proto.FPLeaseSkew {
			return time.Time{}, true // garbage: expired
		}
		return monoTime(l).Add(lease), true
	case fpPending:
		return f.retryAt, true
	}
	return time.Time{}, false
}

// expired reports whether the rank's lease is older than lease at now.
func (f *Fastpath) expired(now time.Time, lease time.Duration) bool {
	l, n := f.lease.Load(), MonoNS(now)
	if l < 0 || l > n+proto.FPLeaseSkew {
		return true
	}
	return n-l >= int64(lease)
}

// FastpathBegin runs at the start of q's service: it follows the page's
// words (a release by the rank, a take-over when the lease expired, Busy
// seen clear) and reports whether the engine reads q's own socket in this
// service, and whether it has just started to (the caller gives the
// socket its epoll interest back and reads it).
func (e *Engine) FastpathBegin(q *QP, now time.Time) (read, started bool) {
	return e.FastpathBeginForce(q, now, false)
}

// FastpathBeginForce is FastpathBegin that, with force, takes the socket
// over from the rank even if its lease is fresh: the engine needs it (an
// RD QP's posted work, the retransmission timeout of a datagram the rank
// left outstanding; rd/fastpath.go). Counted as a take-over.
func (e *Engine) FastpathBeginForce(q *QP, now time.Time, force bool) (read, started bool) {
	f := q.FP
	if f == nil || f.off {
		return true, false
	}
	o := f.owner.Load()
	switch f.state {
	case fpDaemon:
		if o != proto.FPOwnerDaemon {
			return e.fastpathViolation(q, o, "while the engine owned the socket (a rank asks for it with Want)")
		}
		return true, false
	case fpRank:
		switch o {
		case proto.FPOwnerRank:
			// A QP in ERROR, or reclaimed, is taken over at once
			// (its work is flushed by the engine, a multicast group
			// takes receives: ud/fastpath.go).
			if !force && !f.expired(now, e.Cfg.Lease()) && q.State != proto.QPStateError && !f.reclaim {
				return false, false
			}
			f.want.Store(0) // a Want left from before is not this rank's request: it asks again
			if !f.owner.CompareAndSwap(proto.FPOwnerRank, proto.FPOwnerDaemon) {
				return false, false // the rank wrote Owner meanwhile: next service
			}
			e.Count(q, CFastpathTakeovers, 1)
			f.takeovers.Add(1)
		case proto.FPOwnerDaemon: // the rank gave it back
			e.Count(q, CFastpathReleases, 1)
			f.releases.Add(1)
		default:
			return e.fastpathViolation(q, o, "")
		}
		f.state, f.retry, f.reclaim = fpPending, fpRetryMin, false
	}
	// fpPending. The compare-and-swap above (or the rank's release) comes
	// before this load of Busy: sequentially consistent atomics.
	if o = f.owner.Load(); o != proto.FPOwnerDaemon {
		return e.fastpathViolation(q, o, "while the engine took the socket over")
	}
	if f.busy.Load() != 0 {
		e.Count(q, CFastpathBusySkips, 1)
		f.retryAt = now.Add(f.retry)
		f.retry = min(2*f.retry, e.Cfg.Lease())
		return false, false
	}
	f.state = fpDaemon
	return true, true
}

// FastpathEnd runs at the end of q's service: when the rank set Want, the
// engine owns the socket and may give it (give: nothing it read waits in
// it for a receive), it gives it back with a fresh lease and reports so
// (the caller takes the socket's epoll interest away). The completions of
// what it read are already published (PostCQE).
func (e *Engine) FastpathEnd(q *QP, now time.Time, give bool) bool {
	if !give || !q.FastpathWanted() {
		return false
	}
	if !e.fastpathGROOff(q) { // fastpath_gro.go: a buffer the kernel coalesced is queued
		return false
	}
	f := q.FP
	f.lease.Store(MonoNS(now))
	f.want.Store(0)
	f.owner.Store(proto.FPOwnerRank)
	f.state = fpRank
	e.Count(q, CFastpathHandbacks, 1)
	f.handbacks.Add(1)
	return true
}

// fastpathViolation ends q's fast path for an Owner word the protocol
// does not allow and fails q; the engine reads the socket from now on.
func (e *Engine) fastpathViolation(q *QP, owner uint32, when string) (read, started bool) {
	f := q.FP
	f.off = true
	e.Count(q, CFastpathViolations, 1)
	what := "is neither the engine's (1) nor the rank's (2)"
	if owner == proto.FPOwnerRank {
		what = "claims the socket for the rank"
	}
	if when != "" {
		what += " " + when
	}
	e.ErrorQP(q, fmt.Sprintf("its fast-path page's owner word (%#x) %s: the fast path ended for it; "+
		"destroy the QP and create another (docs/fastpath.md)", owner, what))
	return true, true
}

// FastpathFail ends q's fast path and fails q for what its rank left in
// the page (why: the field and its bounds; an RD QP's halves,
// rd/fastpath_import.go): counted as a violation; the engine reads the
// socket from now on.
func (e *Engine) FastpathFail(q *QP, why string) {
	f := q.FP
	if f == nil || f.off {
		return
	}
	f.off = true
	e.Count(q, CFastpathViolations, 1)
	e.ErrorQP(q, fmt.Sprintf("its fast-path page's %s: the fast path ended for it; destroy the QP and create another (docs/fastpath.md)", why))
}

// Mem is the page's memory (the client's: distrusted; an RD QP's halves,
// rd/fastpath.go).
func (f *Fastpath) Mem() []byte { return f.m.Mem }

// FastpathRank reports whether q's rank owns its socket now (not a
// take-over waiting for Busy, not ended).
func (q *QP) FastpathRank() bool {
	f := q.FP
	return f != nil && !f.off && f.state == fpRank
}

// FastpathOff reports whether q's fast path ended (a violation).
func (q *QP) FastpathOff() bool { return q.FP != nil && q.FP.off }

// FastpathReclaim makes the engine take q's socket over at its next
// service whatever the lease (the transport needs it: a multicast group
// attached to a UD QP delivers into the receives the rank consumes).
func (q *QP) FastpathReclaim() {
	if f := q.FP; f != nil && f.state == fpRank {
		f.reclaim = true
	}
}

// SetFastpath installs f on q (the engine's goroutine, OpFastpathPage).
// A page without proto.FPFlagGRO gets UDP_GRO turned off on q's socket
// before the socket first goes to the rank (fastpath_gro.go).
func (q *QP) SetFastpath(f *Fastpath) {
	f.groOff = !f.GRO()
	q.FP = f
}

// CLOCK_MONOTONIC in nanoseconds from a time.Time of this process: Go's
// monotonic reading is CLOCK_MONOTONIC (runtime.nanotime), so one
// sample of both clocks relates them (to the sample's microsecond).
var monoBase struct {
	t  time.Time
	ns int64
}

func init() {
	var ts unix.Timespec
	t1 := time.Now()
	unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts)
	t2 := time.Now()
	monoBase.t = t1.Add(t2.Sub(t1) / 2)
	monoBase.ns = ts.Nano()
}

// MonoNS returns t as CLOCK_MONOTONIC nanoseconds (the page's Lease).
func MonoNS(t time.Time) int64 { return monoBase.ns + int64(t.Sub(monoBase.t)) }

// MonoTime is the time.Time of CLOCK_MONOTONIC ns (the page's times).
func MonoTime(ns int64) time.Time { return monoTime(ns) }

// monoTime is the time.Time of CLOCK_MONOTONIC ns (0 <= ns).
func monoTime(ns int64) time.Time { return monoBase.t.Add(time.Duration(ns - monoBase.ns)) }
