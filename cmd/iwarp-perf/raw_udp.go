package main

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net/netip"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// maxUDPPayload is the largest UDP datagram payload over IPv4.
const maxUDPPayload = 65507

// udpTransport is the raw UDP baseline: one non-blocking x/sys/unix socket
// connected to the peer; read(2) polled with sched_yield for the poll window,
// then poll(2); streams are sent with sendmmsg(2) in batches, straight from
// the pattern.
type udpTransport struct {
	fd    int
	local netip.AddrPort
	pat   pattern
	w     waiter
	rbuf  []byte // largest message + 1, so that a longer datagram shows as a wrong length
	hdrs  []mmsghdr
	iovs  []unix.Iovec
	cbuf  [8]byte
	// -raw-batch (raw_udp_batch.go): GSO sends, GRO + recvmmsg receives.
	gso   bool
	cmsgs []uint64
	rx    *rxBatch
}

// mmsghdr is struct mmsghdr of <sys/socket.h>.
type mmsghdr struct {
	hdr unix.Msghdr
	len uint32
	_   [4]byte
}

func socketFamily(ip netip.Addr) int {
	if ip.Is4() || ip.Is4In6() {
		return unix.AF_INET
	}
	return unix.AF_INET6
}

func sockaddr(ap netip.AddrPort) unix.Sockaddr {
	if ap.Addr().Is4() || ap.Addr().Is4In6() {
		return &unix.SockaddrInet4{Port: int(ap.Port()), Addr: ap.Addr().Unmap().As4()}
	}
	return &unix.SockaddrInet6{Port: int(ap.Port()), Addr: ap.Addr().As16()}
}

func addrPortOf(sa unix.Sockaddr) netip.AddrPort {
	switch a := sa.(type) {
	case *unix.SockaddrInet4:
		return netip.AddrPortFrom(netip.AddrFrom4(a.Addr), uint16(a.Port))
	case *unix.SockaddrInet6:
		return netip.AddrPortFrom(netip.AddrFrom16(a.Addr), uint16(a.Port))
	}
	return netip.AddrPort{}
}

// setBuffers asks for socket buffers of n bytes each way, first with the
// privileged *FORCE options (root may exceed the sysctl limits), and accepts
// what the kernel grants.
func setBuffers(fd, n int) {
	if unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_RCVBUFFORCE, n) != nil {
		unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_RCVBUF, n)
	}
	if unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_SNDBUFFORCE, n) != nil {
		unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_SNDBUF, n)
	}
}

// bufferBytes sizes socket buffers so that a whole window of maxSize
// messages fits (with the kernel's per-datagram overhead).
func bufferBytes(window, maxSize int) int {
	return min(max(2*window*(maxSize+1024), 1<<20), 64<<20)
}

func newUDPTransport(ip netip.Addr, maxSize, window int, w waiter) (*udpTransport, error) {
	fd, err := unix.Socket(socketFamily(ip), unix.SOCK_DGRAM|unix.SOCK_NONBLOCK|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("raw udp: socket: %w", err)
	}
	t := &udpTransport{fd: fd, pat: newPattern(maxSize), w: w, rbuf: make([]byte, maxSize+1)}
	if err := unix.Bind(fd, sockaddr(netip.AddrPortFrom(ip, 0))); err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("raw udp: bind %v: %w", ip, err)
	}
	sa, err := unix.Getsockname(fd)
	if err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("raw udp: getsockname: %w", err)
	}
	t.local = addrPortOf(sa)
	setBuffers(fd, bufferBytes(window, maxSize))
	return t, nil
}

func (t *udpTransport) name() string      { return "raw-udp" }
func (t *udpTransport) localAddr() string { return t.local.String() }
func (t *udpTransport) prepare(int) error { return nil }
func (t *udpTransport) release() error    { return nil }
func (t *udpTransport) close() error      { return unix.Close(t.fd) }

func (t *udpTransport) connect(peer string, _ bool) error {
	ap, err := netip.ParseAddrPort(peer)
	if err != nil {
		return fmt.Errorf("raw udp: peer address %q: %w", peer, err)
	}
	if err := unix.Connect(t.fd, sockaddr(ap)); err != nil {
		return fmt.Errorf("raw udp: connect %v: %w", ap, err)
	}
	return nil
}

func (t *udpTransport) blockOut(d time.Duration) error { return pollFD(t.fd, unix.POLLOUT, d) }
func (t *udpTransport) blockIn(d time.Duration) error  { return pollFD(t.fd, unix.POLLIN, d) }

// write sends one datagram.
func (t *udpTransport) write(b []byte) error {
	return t.w.wait(func() (bool, error) {
		_, err := unix.Write(t.fd, b)
		switch {
		case err == nil:
			return true, nil
		case errors.Is(err, unix.EAGAIN), errors.Is(err, unix.ENOBUFS):
			return false, nil
		}
		return false, fmt.Errorf("raw udp: send: %w", err)
	}, t.blockOut)
}

func (t *udpTransport) send(first uint64, n, size int) error {
	if n == 1 {
		return t.write(t.pat.message(first, size))
	}
	if t.gso && size > 0 {
		return t.sendGSO(first, n, size)
	}
	if cap(t.hdrs) < n {
		t.hdrs = make([]mmsghdr, n)
		t.iovs = make([]unix.Iovec, n)
	}
	hdrs, iovs := t.hdrs[:n], t.iovs[:n]
	for i := range hdrs {
		msg := t.pat.message(first+uint64(i), size)
		iovs[i] = unix.Iovec{}
		if size > 0 {
			iovs[i].Base = &msg[0]
		}
		iovs[i].SetLen(size)
		hdrs[i] = mmsghdr{}
		hdrs[i].hdr.Iov = &iovs[i]
		hdrs[i].hdr.SetIovlen(1)
	}
	for len(hdrs) > 0 {
		var sent int
		err := t.w.wait(func() (bool, error) {
			r, _, errno := unix.Syscall6(unix.SYS_SENDMMSG, uintptr(t.fd), uintptr(unsafe.Pointer(&hdrs[0])), uintptr(len(hdrs)), 0, 0, 0)
			switch {
			case errno == 0:
				sent = int(r)
				return true, nil
			case errno == unix.EAGAIN || errno == unix.ENOBUFS:
				return false, nil
			}
			return false, fmt.Errorf("raw udp: sendmmsg: %w", errno)
		}, t.blockOut)
		if err != nil {
			return err
		}
		hdrs = hdrs[sent:]
	}
	return nil
}

// read waits for one datagram into rbuf.
func (t *udpTransport) read() ([]byte, error) {
	if t.rx != nil {
		return t.readBatched()
	}
	var got []byte
	err := t.w.wait(func() (bool, error) {
		n, err := unix.Read(t.fd, t.rbuf)
		switch {
		case err == nil:
			got = t.rbuf[:n]
			return true, nil
		case errors.Is(err, unix.EAGAIN):
			return false, nil
		case errors.Is(err, unix.ECONNREFUSED):
			return false, errors.New("raw udp: the peer's socket is gone (connection refused)")
		}
		return false, fmt.Errorf("raw udp: receive: %w", err)
	}, t.blockIn)
	return got, err
}

func (t *udpTransport) recv(int) ([]byte, error) { return t.read() }

func (t *udpTransport) sendCredit(count uint64) error {
	binary.LittleEndian.PutUint64(t.cbuf[:], count)
	return t.write(t.cbuf[:])
}

// recvCredit waits for a credit, then takes every credit already queued
// and returns the highest (credits are cumulative).
func (t *udpTransport) recvCredit() (uint64, error) {
	b, err := t.read()
	for {
		if err != nil {
			return 0, err
		}
		if len(b) != 8 {
			return 0, fmt.Errorf("raw udp: credit message of %d bytes, want 8", len(b))
		}
		c := binary.LittleEndian.Uint64(b)
		if t.rx != nil {
			b, err = t.pollBatched()
			if err == nil && b == nil {
				return c, nil
			}
			if err == nil && len(b) == 8 && binary.LittleEndian.Uint64(b) < c {
				binary.LittleEndian.PutUint64(b, c)
			}
			continue
		}
		n, rerr := unix.Read(t.fd, t.rbuf)
		if errors.Is(rerr, unix.EAGAIN) {
			return c, nil
		}
		if rerr == nil {
			b = t.rbuf[:n]
			if n == 8 && binary.LittleEndian.Uint64(b) < c {
				binary.LittleEndian.PutUint64(b, c)
			}
		}
		err = rerr
	}
}
