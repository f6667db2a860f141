package verbsd

import "time"

// qpOps is what the engine asks of a QP's transport (UD, RD, RC): the engine
// core keeps the polling set, the ready list, timers and sleep, and knows no
// transport; each QP's transport serves it.
type qpOps interface {
	// added: the QP joined its engine's polling set (engine.addQP).
	added()
	// hasWork reports whether the client published work to act on now
	// (sends in RTS, work requests to flush in ERROR, receives posted for
	// datagrams held back): the test before the engine sleeps.
	hasWork() bool
	// due reports transport conditions that make the QP ready now beyond
	// a readable or blocked socket and hasWork: a timer due, a socket
	// writable again.
	due(now time.Time) bool
	// deadline is the transport's next timer (retransmission, reassembly,
	// connection close), if any: the engine sleeps no longer.
	deadline() (time.Time, bool)
	// service does at most PollBatch units of work and reports whether it
	// did any.
	service(now time.Time) bool
	// event is an epoll event on the QP's socket; it reports whether the
	// socket is readable (false: the transport consumed the event).
	event(events uint32) bool
	// removing: the QP leaves the polling set (destroy, session end) with
	// its socket still open; removed: it left it.
	removing()
	removed()
	// closed: its socket and region were released (closeQP).
	closed()
	// logsOwnEnd reports whether the transport logs why the QP ended
	// itself (a connected RC QP: rc_log.go), so errorQP need not.
	logsOwnEnd() bool
}

// engineHooks is the transports' per-engine work beyond their QPs: a
// destroyed RD QP's lingering port (rd_linger.go).
type engineHooks interface {
	// service does the work due now and reports whether it did any.
	service(now time.Time) bool
	// event takes an epoll event on a descriptor that is none of the
	// engine's QPs' and reports whether it was the transports'.
	event(fd int32) bool
	// deadline is the next such work's time, if any.
	deadline() (time.Time, bool)
	// closeAll releases everything (the engine stops).
	closeAll()
}
