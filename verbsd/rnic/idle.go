package rnic

import (
	"time"
	"unsafe"

	"github.com/iwarpd/iwarpd/verbsd/config"
	"golang.org/x/sys/unix"
)

// The engine's wait discipline between passes (docs/iwarpd.md "-idle"),
// the daemon's side of the provider's (c/prov/iwd_idle.c): the engine
// gives its CPU away after a pass that completed work (a client may be
// polling for it) and between empty passes of its poll window.
//
//   - yield: sched_yield(2). Free when nothing else wants the CPU; but on a
//     CPU shared with processes that never wait it queues the engine
//     behind them for whole time slices (under EEVDF a yield also moves the
//     yielder's deadline a slice later), and every message through the
//     engine pays it: milliseconds (issue 20, "Under load").
//   - adaptive (config.IdleAdaptive, the default): yield while yields
//     return quickly; once a yield or a sleep kept the engine away longer
//     than idleContended (another task ran for most of a slice) twice
//     within idleHold, sleep
//     config.Config.IdleSleep (nanosleep(2), the thread's timer slack
//     lowered at start) instead of yielding, for idleHold after it, and
//     skip the poll window (run: sleep in epoll_wait at once; sleep-polling
//     costs a wake-up per sleep). A task woken from a sleep runs before the
//     busy processes whose slices a yielder waits for.
//
// Neither blocks longer than one sleep, so no doorbell or datagram waits
// on it beyond that: the next pass sees them.

// idleContended and idleHold are the provider's IWD_IDLE_CONTENDED_NS and
// IWD_IDLE_HOLD_NS.
const (
	idleContended = time.Millisecond
	idleHold      = 100 * time.Millisecond
)

// idler is an engine's wait state (engine goroutine only).
type idler struct {
	mode           config.IdleMode
	sleep          unix.Timespec
	sleepFor       time.Duration
	contendedUntil time.Time
	longAt         time.Time // when the last long return (> idleContended) ended
	// yields, sleeps count the calls (tests; iwarpctl does not show them).
	yields, sleeps uint64
}

func newIdler(c *config.Config) idler {
	return idler{mode: c.Idle, sleep: unix.NsecToTimespec(int64(c.IdleSleep)), sleepFor: c.IdleSleep}
}

// setSlack lowers the calling thread's timer slack to the sleep (prctl(2)
// PR_SET_TIMERSLACK; the default, 50 µs, would lengthen each short sleep by
// that much). The engine's thread is locked and its own.
func (d *idler) setSlack() {
	if d.mode == config.IdleAdaptive && d.sleepFor > 0 && d.sleepFor < 50*time.Microsecond {
		unix.Prctl(unix.PR_SET_TIMERSLACK, uintptr(max(d.sleepFor, time.Microsecond)), 0, 0, 0)
	}
}

// contended says whether the CPU was seen contended lately (adaptive
// mode): the engine then skips its poll window and sleeps in epoll_wait,
// woken by the next doorbell or datagram.
func (d *idler) contended(now time.Time) bool {
	return d.mode == config.IdleAdaptive && now.Before(d.contendedUntil)
}

// idle gives the CPU away once: a yield, or a sleep while the CPU is seen
// contended.
func (d *idler) idle() {
	if d.mode != config.IdleAdaptive {
		d.yields++
		schedYield()
		return
	}
	before := time.Now()
	var away time.Duration
	if before.Before(d.contendedUntil) {
		d.sleeps++
		// Raw: the engine's thread keeps its P for a few µs rather than
		// hand it to the scheduler (as schedYield).
		unix.RawSyscall(unix.SYS_NANOSLEEP, uintptr(unsafe.Pointer(&d.sleep)), 0, 0)
		away = time.Since(before) - d.sleepFor
	} else {
		d.yields++
		schedYield()
		away = time.Since(before)
	}
	if away > idleContended {
		// One long return may be a blip; two within idleHold are
		// contention.
		if !d.longAt.IsZero() && before.Sub(d.longAt) < idleHold {
			d.contendedUntil = before.Add(away + idleHold)
		}
		d.longAt = before.Add(away)
	}
}
