package rc

import (
	"fmt"
	"time"

	"github.com/iwarpd/iwarpd/verbsd/rnic"
)

// Why an RC QP left RTS: one info line per connection end, so that a user
// who sees completions flushed (WCWRFlushErr) can tell from the daemon's
// log which side ended the connection and why: a Terminate this daemon
// sent (RFC 5040 §5.6.3, its layer/type/code) and what made it send it, a
// Terminate the peer sent, the LLP (TCP) failing or closing (RFC 5044 §7:
// the end of the stream), or the local client disconnecting, resetting or
// moving the QP to ERROR. Never per packet.

// setCause records what is ending the connection; the first cause wins
// (the later ones are consequences of it).
func (c *conn) setCause(s string) {
	if c.cause == "" {
		c.cause = s
	}
}

// logClosed logs the end of q's connection (close, before its state
// is cleared; RemoveQP). reason and detail are close's; then says what
// became of the QP.
func (e *engine) logClosed(q *QP, reason CloseReason, detail, then string) {
	c := q.Conn
	log := q.Session.Dev.Log
	side := "responder"
	if c.initiator {
		side = "initiator"
	}
	cause := c.cause
	switch {
	case cause != "":
	case reason == ClosedGraceful:
		cause = "the peer closed the connection (TCP FIN)"
	case reason == ClosedSocketError:
		cause = "the TCP connection failed"
	default:
		cause = reason.String()
	}
	term := ""
	switch {
	case c.term == nil:
	case reason == ClosedTermReceived || c.termWire != nil && c.termOff == len(c.termWire):
		term = ", Terminate " + c.term.Err.Error()
	default:
		term = ", Terminate " + c.term.Err.Error() + " not sent"
	}
	flushed := ""
	if c.pend.n > 0 {
		flushed = fmt.Sprintf("; %d work request(s) in progress complete flushed", c.pend.n)
	}
	// A client (or a peer) can end connections at will: rate-limited
	// (rnic/loglimit.go).
	ok, n := q.Session.Dev.EventLog.Allow(time.Now())
	if !ok {
		return
	}
	log.Infof("session %d (pid %d): RC QP %d (QPN %d, %s, %v -> %v) connection ended, %s: %s (%s%s%s)%s%s",
		q.Session.ID, q.Session.Cred.Pid, q.Handle, q.QPN, side, c.local, c.remote, then, cause, reason, detail, term, flushed,
		rnic.Note(n))
}
