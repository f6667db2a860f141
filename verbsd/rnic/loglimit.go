package rnic

import (
	"fmt"
	"sync"
	"time"
)

// LogLimiter bounds the info lines of events a client or a remote peer can
// cause at will — sessions opening and closing, RC connections failing, RD
// peers declared dead — so that a hostile client cannot flood the daemon's
// log: a token bucket of Burst lines refilled at one line per Every. A line
// refused is counted, and the next line allowed says how many were left out
// (Note). Safe for concurrent use: the control goroutines and the engines
// share one per daemon (Device.EventLog).
type LogLimiter struct {
	Burst int
	Every time.Duration

	mu         sync.Mutex
	tokens     float64
	last       time.Time
	started    bool
	suppressed int
}

// Default limits of Device.EventLog: a burst of 50 lines, then one a
// second.
const (
	eventLogBurst = 50
	eventLogEvery = time.Second
)

// Set changes the limits (tests; the daemon keeps the defaults).
func (l *LogLimiter) Set(burst int, every time.Duration) {
	l.mu.Lock()
	l.Burst, l.Every, l.started = burst, every, false
	l.mu.Unlock()
}

// Allow reports whether one more line may be logged at now. When it may,
// suppressed is the number of lines refused since the last allowed one.
func (l *LogLimiter) Allow(now time.Time) (ok bool, suppressed int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	burst := float64(max(l.Burst, 1))
	if !l.started {
		l.tokens, l.last, l.started = burst, now, true
	}
	if l.Every > 0 && now.After(l.last) {
		l.tokens = min(burst, l.tokens+float64(now.Sub(l.last))/float64(l.Every))
	}
	if now.After(l.last) {
		l.last = now
	}
	if l.tokens < 1 {
		l.suppressed++
		return false, 0
	}
	l.tokens--
	suppressed, l.suppressed = l.suppressed, 0
	return true, suppressed
}

// Note is the suffix of an allowed line that says how many were refused
// before it ("" when none).
func Note(suppressed int) string {
	if suppressed == 0 {
		return ""
	}
	return fmt.Sprintf(" [%d similar lines suppressed by the log rate limit]", suppressed)
}
