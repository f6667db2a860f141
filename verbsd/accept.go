package verbsd

import (
	"errors"
	"net"
	"sync"
	"time"

	"github.com/iwarpd/iwarpd/proto"
	"golang.org/x/sys/unix"
)

// Accepting control connections when descriptors run out. accept(2) fails with EMFILE/ENFILE while the connection stays in the
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

// fdReserve is the spare descriptor: a duplicate of null, a descriptor of
// /dev/null held for the daemon's life. Refusing a connection turns the
// accepted socket back into the reserve with dup3(2), which closes the
// socket and reuses its number in one step, so no other goroutine's open
// can take the reserve's place between the two.
type fdReserve struct {
	mu   sync.Mutex
	null int // -1 if /dev/null could not be opened: no reserve
	fd   int
}

func newFDReserve() *fdReserve {
	r := &fdReserve{null: -1, fd: -1}
	if fd, err := unix.Open("/dev/null", unix.O_RDONLY|unix.O_CLOEXEC, 0); err == nil {
		r.null = fd
	}
	r.take()
	return r
}

// take makes a reserve if there is none (it can fail while descriptors
// are exhausted; the next failed accept tries again).
func (r *fdReserve) take() {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.fd < 0 && r.null >= 0 {
		if fd, err := unix.FcntlInt(uintptr(r.null), unix.F_DUPFD_CLOEXEC, 0); err == nil {
			r.fd = fd
		}
	}
}

// refuse frees the reserve, runs accept (which should get the freed
// number), and if accept returned a descriptor, makes it the reserve again.
func (r *fdReserve) refuse(accept func() int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.fd < 0 {
		return
	}
	unix.Close(r.fd)
	r.fd = -1
	nfd := accept()
	if nfd < 0 {
		if fd, err := unix.FcntlInt(uintptr(r.null), unix.F_DUPFD_CLOEXEC, 0); err == nil {
			r.fd = fd
		}
		return
	}
	if err := unix.Dup3(r.null, nfd, unix.O_CLOEXEC); err != nil {
		unix.Close(nfd)
		return
	}
	r.fd = nfd
}

// close gives the reserve and null back (server shutdown).
func (r *fdReserve) close() {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, fd := range []*int{&r.fd, &r.null} {
		if *fd >= 0 {
			unix.Close(*fd)
			*fd = -1
		}
	}
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
	if outOfFDs(err) {
		s.reserve.take() // if an earlier refusal lost it and something was freed since
		s.refuseOne(l)
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
// which ofverbs and iwarpctl report), and closes it. It works on the raw
// descriptor: net's Accept with an expired deadline never calls accept(2),
// and wrapping the new descriptor in a net.Conn would dup it, which needs
// a second free descriptor.
func (s *Server) refuseOne(l *net.UnixListener) {
	msg, err := proto.Marshal(proto.Header{Version: proto.ABIVersion, Op: proto.OpHello | proto.OpReply, Seq: 1, Status: unix.EMFILE},
		proto.ErrorBody{Error: "iwarpd is out of file descriptors; try again later (the operator can raise its descriptor limit)"})
	if err != nil {
		s.log.Warnf("refusing a control connection: encoding the reply: %v", err)
		return
	}
	rc, err := l.SyscallConn()
	if err != nil {
		return
	}
	rc.Control(func(lfd uintptr) {
		s.reserve.refuse(func() int {
			// The listener is non-blocking: EAGAIN if the client gave up.
			nfd, _, err := unix.Accept4(int(lfd), unix.SOCK_CLOEXEC|unix.SOCK_NONBLOCK)
			if err != nil {
				return -1
			}
			drainHello(nfd)
			unix.Write(nfd, msg) // best effort: the client may be gone
			return nfd
		})
	})
}

// refuseHelloWait bounds how long a refusal waits for the client's hello.
const refuseHelloWait = 200 * time.Millisecond

// drainHello waits (bounded) for the refused client's hello and reads it:
// closing a unix socket with unread data resets the connection, and the
// client would see ECONNRESET instead of the reply that says why.
func drainHello(fd int) {
	deadline := time.Now().Add(refuseHelloWait)
	for {
		left := time.Until(deadline)
		if left <= 0 {
			return
		}
		pfd := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}
		n, err := unix.Poll(pfd, int(left/time.Millisecond)+1)
		if err == unix.EINTR {
			continue
		}
		if err != nil || n == 0 {
			return
		}
		var buf [64]byte // a record read in part is discarded whole
		unix.Recvfrom(fd, buf[:], unix.MSG_DONTWAIT)
		return
	}
}
