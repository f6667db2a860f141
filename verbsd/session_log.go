package verbsd

import (
	"errors"
	"fmt"
	"io"
	"net"
	"time"

	"github.com/iwarpd/iwarpd/proto"
	"github.com/iwarpd/iwarpd/verbsd/rnic"
	"golang.org/x/sys/unix"
)

// One info line when a session starts and one when it ends (issue 19: at
// info the daemon said nothing about clients coming and going), with what
// it held when it ended and why it ended; never per request. Inspect
// sessions (iwarpctl) stay at debug. The lines go through the device's
// EventLog limiter: a client that opens and closes sessions in a loop
// cannot flood the log (docs/iwarpd.md "Logging").

// held is what a session owned when it ended, counted on its engine just
// before the teardown.
type held struct{ qps, mrs, cqs int }

// logStart logs a session's hello.
func (s *session) logStart() {
	if s.Inspect {
		return
	}
	if ok, n := s.Dev.EventLog.Allow(time.Now()); ok {
		s.Dev.Log.Infof("session %d started: client %q, pid %d, uid %d%s", s.ID, s.Client, s.Cred.Pid, s.Cred.Uid, rnic.Note(n))
	}
}

// logEnd logs a session's end: why, and what the teardown reclaimed. A
// hello the daemon refused (another ABI version, the per-user session
// limit) is logged at info too: the client only sees its error.
func (s *session) logEnd(why string, h held, helloRefused bool) {
	if helloRefused && !s.Inspect {
		if ok, n := s.Dev.EventLog.Allow(time.Now()); ok {
			s.Dev.Log.Infof("session %d refused: pid %d, uid %d: %s%s", s.ID, s.Cred.Pid, s.Cred.Uid, why, rnic.Note(n))
		}
		return
	}
	if !s.Hello || s.Inspect {
		s.Dev.Log.Debugf("session %d (pid %d, uid %d): closed (%s)", s.ID, s.Cred.Pid, s.Cred.Uid, why)
		return
	}
	if ok, n := s.Dev.EventLog.Allow(time.Now()); ok {
		s.Dev.Log.Infof("session %d ended: client %q, pid %d, uid %d: %s; reclaimed %d QPs, %d MRs, %d CQs%s",
			s.ID, s.Client, s.Cred.Pid, s.Cred.Uid, why, h.qps, h.mrs, h.cqs, rnic.Note(n))
	}
}

// endReason says why serve's Receive failed: the client went away, or the
// daemon closed the connection because it is stopping.
func (s *session) endReason(err error) string {
	s.srv.mu.Lock()
	closed := s.srv.closed
	s.srv.mu.Unlock()
	switch {
	case closed:
		return "the daemon is shutting down"
	case errors.Is(err, io.EOF):
		return "the client closed its connection (exited or closed the session)"
	case errors.Is(err, unix.ECONNRESET):
		return "the client's connection was reset (it exited with requests unread)"
	case errors.Is(err, net.ErrClosed):
		return "the connection was closed by the daemon"
	default:
		return fmt.Sprintf("reading its control socket failed: %v", err)
	}
}

// logLimit logs, at warn, a request that a configured limit refused: the
// client sees only its error reply, and the operator who must raise the
// limit reads the log (issue 19, item 8: fabtests' fi_mr_reg failed with
// -FI_EOTHER while the daemon said nothing). The message (rnic.LimitErrf)
// names the limit, what is in use and the flag; the lines share
// Device.LimitLog's bucket, so a client looping on a refusal cannot flood
// the log.
func (s *session) logLimit(op proto.Op, err error) {
	flag := rnic.LimitOf(err)
	if flag == "" || s.Inspect {
		return
	}
	var oe *rnic.OpError
	msg := err.Error()
	if errors.As(err, &oe) {
		msg = oe.Msg
	}
	if ok, n := s.Dev.LimitLog.Allow(time.Now()); ok {
		s.Dev.Log.Warnf("session %d (client %q, pid %d, uid %d): %v refused by the limit -%s: %s%s",
			s.ID, s.Client, s.Cred.Pid, s.Cred.Uid, op, flag, msg, rnic.Note(n))
	}
}
