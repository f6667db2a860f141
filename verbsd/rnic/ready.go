package rnic

import "time"

// The ready list: a pass serves the QPs that can have
// work, not every QP, so that N idle QPs beside one busy one cost a pass
// what none would.
//
// A QP goes on the list when
//   - epoll says its socket is readable (or, RC, writable again) — pollFDs;
//   - it is installed (AddQP, AddUnpolledQP) or a control command ran (any
//     command may change any QP: state, connection, destruction), or the
//     engine woke from sleep (a doorbell names a session, not a QP): then
//     the next pass serves every QP once (scanAll);
//   - the probe finds work on it: each pass looks at ReadyProbe more QPs
//     of the whole set, round-robin, with the same test the engine makes
//     before it sleeps (qp.hasWork, a timer due). A client that posts
//     while the engine is awake rings no doorbell (DESIGN.md §3: no
//     syscall per work request), and the rings are the client's memory,
//     so a post on a QP off the list is seen within ⌈N/ReadyProbe⌉
//     passes; a QP that worked within readyLinger stays on the list, so a
//     busy QP's next post is seen in the next pass.
//
// A QP leaves the list when it is quiescent: no readable socket, no send
// blocked on a full socket buffer, no work by hasWork, no timer due, and
// no work done for readyLinger. Before it sleeps the engine still looks
// at every QP (pending, sleepTimeout): once per sleep, not per pass.

const (
	// ReadyProbe is how many QPs of the whole set a pass looks at for
	// work beyond the ready list.
	ReadyProbe = 8
	// readyLinger is how long a QP that did work stays on the list.
	readyLinger = time.Millisecond
)

// MarkReady puts q on the ready list (once).
func (e *Engine) MarkReady(q *QP) {
	if !q.onReady {
		q.onReady = true
		e.ready = append(e.ready, q)
	}
}

// unready takes q off the ready list (RemoveQP).
func (e *Engine) unready(q *QP) {
	if !q.onReady {
		return
	}
	q.onReady = false
	for i, x := range e.ready {
		if x == q {
			e.ready = append(e.ready[:i], e.ready[i+1:]...)
			return
		}
	}
}

// due reports whether q has something to do now.
func (q *QP) due(now time.Time) bool {
	if q.Session.faulted.Load() { // rnic/engines.go: its teardown is on its way
		return false
	}
	if q.Readable || q.Blocked || q.hasWork() {
		return true
	}
	return q.Ops.Due(now) // ud/qp.go
}

// fillReady adds to the ready list what a pass must serve beyond it:
// every QP after a wake-up or a command, else what the probe finds.
func (e *Engine) fillReady(now time.Time) {
	if e.scanAll {
		e.scanAll = false
		for _, q := range e.QPs {
			e.MarkReady(q)
		}
		return
	}
	n := len(e.QPs)
	for range min(ReadyProbe, n) {
		e.probe = (e.probe + 1) % n
		q := e.QPs[e.probe]
		e.Visits++
		e.cur = q.Session // the probe reads the client's rings (rnic/fault.go)
		if !q.onReady && q.due(now) {
			e.MarkReady(q)
		}
	}
}

// pruneReady drops the quiescent QPs from the ready list.
func (e *Engine) pruneReady(now time.Time) {
	keep := e.ready[:0]
	for _, q := range e.ready {
		e.cur = q.Session
		if now.Sub(q.lastWork) < readyLinger || q.due(now) {
			keep = append(keep, q)
			continue
		}
		q.onReady = false
	}
	clear(e.ready[len(keep):])
	e.ready = keep
}
