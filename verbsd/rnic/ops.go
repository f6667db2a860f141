package rnic

import (
	"fmt"
	"time"
)

// QPOps is what the engine asks of a QP's transport (UD, RD, RC): the engine
// core keeps the polling set, the ready list, timers and sleep, and knows no
// transport; each QP's transport serves it.
type QPOps interface {
	// Added: the QP joined its engine's polling set (engine.AddQP).
	Added()
	// HasWork reports whether the client published work to act on now
	// (sends in RTS, work requests to flush in ERROR, receives posted for
	// datagrams held back): the test before the engine sleeps.
	HasWork() bool
	// Due reports transport conditions that make the QP ready now beyond
	// a readable or blocked socket and hasWork: a timer Due, a socket
	// writable again.
	Due(now time.Time) bool
	// Deadline is the transport's next timer (retransmission, reassembly,
	// connection close), if any: the engine sleeps no longer.
	Deadline() (time.Time, bool)
	// Service does at most PollBatch units of work and reports whether it
	// did any.
	Service(now time.Time) bool
	// Event is an epoll Event on the QP's socket; it reports whether the
	// socket is readable (false: the transport consumed the Event).
	Event(events uint32) bool
	// Removing: the QP leaves the polling set (destroy, session end) with
	// its socket still open; removed: it left it.
	Removing()
	Removed()
	// Closed: its socket and region were released (CloseQP).
	Closed()
	// LogsOwnEnd reports whether the transport logs why the QP ended
	// itself (a connected RC QP: rc/log.go), so errorQP need not.
	LogsOwnEnd() bool
}

// EngineHooks is a transport's per-engine state and work beyond its QPs: a
// destroyed RD QP's lingering port (rd/linger.go).
type EngineHooks interface {
	// Service does the work due now and reports whether it did any.
	Service(now time.Time) bool
	// Event takes an epoll event on a descriptor that is none of the
	// engine's QPs' (its epoll events) and reports whether it was the
	// transports'.
	Event(fd int32, events uint32) bool
	// Deadline is the next such work's time, if any.
	Deadline() (time.Time, bool)
	// CloseAll releases everything (the engine stops).
	CloseAll()
	// Inspect adds the transport's engine-wide figures to m (iwarpctl).
	Inspect(m map[string]int64)
}

// ExtOf returns the per-engine state of type T that the server gave e
// (Ext: verbsd/server.go attachTransports), the one way every transport
// finds its view of the engine serving a QP. It panics without one: an
// engine is never started without its transports.
func ExtOf[T EngineHooks](e *Engine) T {
	for _, x := range e.Ext {
		if t, ok := x.(T); ok {
			return t
		}
	}
	panic(fmt.Sprintf("verbsd: engine %d has no %T", e.ID, *new(T)))
}
