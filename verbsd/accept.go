package verbsd

import (
	"errors"
	"net"
	"sync"
	"time"

	"github.com/iwarpd/iwarpd/proto"
	"golang.org/x/sys/unix"
)

// Accepting control connections when descriptors run out (issue 13, point
// 7). accept(2) fails with EMFILE/ENFILE while the connection stays in the
// backlog, so retrying at once spins (a core and a log line each time).
// Serve instead
//   - keeps one descriptor in reserve (/dev/null): on EMFILE it closes it,
//     accepts the waiting connection, answers its hello with EMFILE ("out of
//     file descriptors") and closes it, then takes the reserve back — the
//     client gets a clear error at once instead of a hello timeout;
//   - backs off (acceptBackoffFirst doubling to acceptBackoffMax, reset by
//     a successful accept), as net/http's Server does;
//   - logs the condition at most once per acceptLogEvery, with the number
//     of failures since the last line.

const (
	acceptBackoffFirst = 5 * time.Millisecond
	acceptBackoffMax   = time.Second
	acceptLogEvery     = 10 * time.Second
)

// fdReserve is the spare descriptor.
type fdReserve struct {
	mu sync.Mutex
	fd int
}

func (r *fdReserve) take() {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.fd < 0 {
		if fd, err := unix.Open("/dev/null", unix.O_RDONLY|unix.O_CLOEXEC, 0); err == nil {
			r.fd = fd
		}
	}
}

// release frees the spare descriptor; it reports whether there was one.
func (r *fdReserve) release() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.fd < 0 {
		return false
	}
	unix.Close(r.fd)
	r.fd = -1
	return true
}

// outOfFDs reports whether an accept error means descriptors (or kernel
// memory for them) ran out.
func outOfFDs(err error) bool {
	return errors.Is(err, unix.EMFILE) || errors.Is(err, unix.ENFILE) ||
		errors.Is(err, unix.ENOBUFS) || errors.Is(err, unix.ENOMEM)
}

// acceptThrottle is one Serve loop's backoff and log rate limit.
type acceptThrottle struct {
	delay   time.Duration
	lastLog time.Time
	failed  int
}

// acceptFailed handles a failed accept on l: the rate-limited log line, the
// reserve trick when descriptors ran out, then the pause.
func (s *Server) acceptFailed(l *net.UnixListener, th *acceptThrottle, err error) {
	th.failed++
	if now := time.Now(); now.Sub(th.lastLog) >= acceptLogEvery {
		if outOfFDs(err) {
			s.log.Warnf("accepting control connections: %v (%d failures since the last report): the daemon is out of file descriptors; raise its limit (LimitNOFILE= in the systemd unit, ulimit -n) or lower -max-listeners and the session limits", err, th.failed)
		} else {
			s.log.Warnf("accepting control connections: %v (%d failures since the last report)", err, th.failed)
		}
		th.lastLog, th.failed = now, 0
	}
	if outOfFDs(err) && s.reserve.release() {
		s.refuseOne(l)
		s.reserve.take()
	}
	if th.delay == 0 {
		th.delay = acceptBackoffFirst
	} else {
		th.delay = min(2*th.delay, acceptBackoffMax)
	}
	time.Sleep(th.delay)
}

// refuseOne accepts one waiting connection with the reserve descriptor,
// tells it the daemon is out of descriptors (as the reply to its hello,
// which ofverbs and iwarpctl report), and closes it.
func (s *Server) refuseOne(l *net.UnixListener) {
	l.SetDeadline(time.Now())
	defer l.SetDeadline(time.Time{})
	uc, err := l.AcceptUnix()
	if err != nil {
		return
	}
	c := proto.NewConn(uc)
	c.TrySend(proto.Header{Version: proto.ABIVersion, Op: proto.OpHello | proto.OpReply, Seq: 1, Status: unix.EMFILE},
		proto.ErrorBody{Error: "iwarpd is out of file descriptors; try again later (the operator can raise its descriptor limit)"})
	uc.Close()
}
