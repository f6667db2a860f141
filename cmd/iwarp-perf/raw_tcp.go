package main

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net/netip"
	"time"

	"golang.org/x/sys/unix"
)

// maxTCPMessage bounds -s for the raw TCP baseline.
const maxTCPMessage = 64 << 20

// tcpTransport is the raw TCP baseline: a non-blocking x/sys/unix socket
// with TCP_NODELAY and the same wait discipline as the UDP one. Messages are
// framed by their agreed size; a receive buffer collects the stream.
type tcpTransport struct {
	lfd    int // listening socket (server), -1 once accepted
	fd     int // data connection
	family int
	local  netip.AddrPort
	pat    pattern
	w      waiter
	bufLen int
	// stream receive buffer: bytes [r, wr) are received and not yet handed out
	rb    []byte
	r, wr int
	bufs  [][]byte
	cbuf  [8]byte
}

func newTCPTransport(ip netip.Addr, maxSize, window int, w waiter, server bool) (*tcpTransport, error) {
	t := &tcpTransport{lfd: -1, fd: -1, family: socketFamily(ip), pat: newPattern(maxSize), w: w,
		bufLen: bufferBytes(window, maxSize), rb: make([]byte, max(2*maxSize, 256<<10))}
	if !server {
		return t, nil
	}
	fd, err := unix.Socket(t.family, unix.SOCK_STREAM|unix.SOCK_NONBLOCK|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("raw tcp: socket: %w", err)
	}
	unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_REUSEADDR, 1)
	if err := unix.Bind(fd, sockaddr(netip.AddrPortFrom(ip, 0))); err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("raw tcp: bind %v: %w", ip, err)
	}
	if err := unix.Listen(fd, 1); err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("raw tcp: listen: %w", err)
	}
	sa, err := unix.Getsockname(fd)
	if err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("raw tcp: getsockname: %w", err)
	}
	t.lfd, t.local = fd, addrPortOf(sa)
	return t, nil
}

func (t *tcpTransport) name() string { return "raw-tcp" }

func (t *tcpTransport) localAddr() string {
	if t.lfd < 0 {
		return ""
	}
	return t.local.String()
}

func (t *tcpTransport) prepare(int) error { return nil }
func (t *tcpTransport) release() error    { return nil }

func (t *tcpTransport) close() error {
	if t.lfd >= 0 {
		unix.Close(t.lfd)
	}
	if t.fd >= 0 {
		return unix.Close(t.fd)
	}
	return nil
}

// connect accepts the client's connection (server) or connects to the
// server's data address (client), then sets TCP_NODELAY and buffers.
func (t *tcpTransport) connect(peer string, server bool) error {
	if server {
		err := t.w.wait(func() (bool, error) {
			fd, _, err := unix.Accept4(t.lfd, unix.SOCK_NONBLOCK|unix.SOCK_CLOEXEC)
			switch {
			case err == nil:
				t.fd = fd
				return true, nil
			case errors.Is(err, unix.EAGAIN), errors.Is(err, unix.EINTR), errors.Is(err, unix.ECONNABORTED):
				return false, nil
			}
			return false, fmt.Errorf("raw tcp: accept: %w", err)
		}, func(d time.Duration) error { return pollFD(t.lfd, unix.POLLIN, d) })
		if err != nil {
			return fmt.Errorf("raw tcp: waiting for the client's data connection: %w", err)
		}
		unix.Close(t.lfd)
		t.lfd = -1
	} else {
		ap, err := netip.ParseAddrPort(peer)
		if err != nil {
			return fmt.Errorf("raw tcp: peer address %q: %w", peer, err)
		}
		fd, err := unix.Socket(t.family, unix.SOCK_STREAM|unix.SOCK_NONBLOCK|unix.SOCK_CLOEXEC, 0)
		if err != nil {
			return fmt.Errorf("raw tcp: socket: %w", err)
		}
		t.fd = fd
		if err := unix.Connect(fd, sockaddr(ap)); err != nil && !errors.Is(err, unix.EINPROGRESS) {
			return fmt.Errorf("raw tcp: connect %v: %w", ap, err)
		}
		if err := pollFD(fd, unix.POLLOUT, t.w.timeout); err != nil {
			return err
		}
		if soerr, err := unix.GetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_ERROR); err != nil || soerr != 0 {
			return fmt.Errorf("raw tcp: connect %v: %v", ap, errors.Join(err, unix.Errno(soerr)))
		}
	}
	if err := unix.SetsockoptInt(t.fd, unix.IPPROTO_TCP, unix.TCP_NODELAY, 1); err != nil {
		return fmt.Errorf("raw tcp: TCP_NODELAY: %w", err)
	}
	setBuffers(t.fd, t.bufLen)
	return nil
}

// writeAll writes every octet of bufs.
func (t *tcpTransport) writeAll(bufs [][]byte) error {
	for len(bufs) > 0 {
		var n int
		err := t.w.wait(func() (bool, error) {
			var err error
			n, err = unix.Writev(t.fd, bufs)
			switch {
			case err == nil:
				return true, nil
			case errors.Is(err, unix.EAGAIN):
				return false, nil
			}
			return false, fmt.Errorf("raw tcp: send: %w", err)
		}, func(d time.Duration) error { return pollFD(t.fd, unix.POLLOUT, d) })
		if err != nil {
			return err
		}
		for n > 0 && len(bufs) > 0 {
			if n >= len(bufs[0]) {
				n -= len(bufs[0])
				bufs = bufs[1:]
			} else {
				bufs[0] = bufs[0][n:]
				n = 0
			}
		}
		for len(bufs) > 0 && len(bufs[0]) == 0 {
			bufs = bufs[1:]
		}
	}
	return nil
}

func (t *tcpTransport) send(first uint64, n, size int) error {
	t.bufs = t.bufs[:0]
	for i := range n {
		t.bufs = append(t.bufs, t.pat.message(first+uint64(i), size))
	}
	return t.writeAll(t.bufs)
}

// next returns the next n octets of the stream.
func (t *tcpTransport) next(n int) ([]byte, error) {
	for t.wr-t.r < n {
		if len(t.rb)-t.r < n { // compact: the message must be contiguous
			t.wr = copy(t.rb, t.rb[t.r:t.wr])
			t.r = 0
		}
		err := t.w.wait(func() (bool, error) {
			m, err := unix.Read(t.fd, t.rb[t.wr:])
			switch {
			case err == nil && m == 0:
				return false, fmt.Errorf("raw tcp: the peer closed the connection: %w", io.ErrUnexpectedEOF)
			case err == nil:
				t.wr += m
				return true, nil
			case errors.Is(err, unix.EAGAIN):
				return false, nil
			}
			return false, fmt.Errorf("raw tcp: receive: %w", err)
		}, func(d time.Duration) error { return pollFD(t.fd, unix.POLLIN, d) })
		if err != nil {
			return nil, err
		}
	}
	b := t.rb[t.r : t.r+n]
	t.r += n
	return b, nil
}

func (t *tcpTransport) recv(size int) ([]byte, error) { return t.next(size) }

func (t *tcpTransport) sendCredit(count uint64) error {
	binary.LittleEndian.PutUint64(t.cbuf[:], count)
	return t.writeAll([][]byte{t.cbuf[:]})
}

// recvCredit waits for a credit, then takes every credit already received
// and returns the highest (credits are cumulative).
func (t *tcpTransport) recvCredit() (uint64, error) {
	b, err := t.next(8)
	if err != nil {
		return 0, err
	}
	c := binary.LittleEndian.Uint64(b)
	if t.r == t.wr {
		t.r, t.wr = 0, 0
	}
	if m, err := unix.Read(t.fd, t.rb[t.wr:]); err == nil && m > 0 {
		t.wr += m
	}
	for t.wr-t.r >= 8 {
		c = max(c, binary.LittleEndian.Uint64(t.rb[t.r:]))
		t.r += 8
	}
	return c, nil
}
