package ud

import (
	"encoding/binary"
	"errors"
	"net/netip"
	"unsafe"

	"github.com/iwarpd/iwarpd/verbsd/rnic"
	"golang.org/x/sys/unix"
)

// Raw socket I/O of the datagram path: sendmmsg/recvmmsg over msghdr and
// iovec arrays the engine builds itself and reuses, so that the hot path
// does not allocate (unix.SendmsgBuffers / RecvmsgBuffers allocate on every
// call). The iovecs point into the engine's own scratch (Go heap, kept alive
// by the engine's fields for as long as the syscall runs; Go's collector
// does not move objects) and into registered memory (client regions mapped
// by the daemon, outside the Go heap).

const (
	// maxIOVPerMsg is UIO_MAXIOV: the most iovecs of one msghdr.
	maxIOVPerMsg = 1024
	// MaxGSOSegments is UDP_MAX_SEGMENTS of the kernel (64 before 6.x, 128
	// after): the most datagrams one UDP_SEGMENT send may carry.
	MaxGSOSegments = 64
	// maxGSOBytes is the most UDP payload octets of one send, segmented or
	// not (65535 − IPv4 header − UDP header).
	maxGSOBytes = 65507
	// cmsgUDPLen is the space of one SOL_UDP control message with a 16-bit
	// (UDP_SEGMENT) or 32-bit (UDP_GRO) value.
	cmsgUDPLen = unix.SizeofCmsghdr + 8
)

// SysSendmmsg sends msgs with one sendmmsg(2) (MSG_DONTWAIT) and returns how
// many were sent. As the kernel does, an error is only reported when the
// first message fails; a later failure shows as a short count.
func SysSendmmsg(fd int, msgs []unix.Mmsghdr) (int, error) {
	if len(msgs) == 0 {
		return 0, nil
	}
	// MSG_DONTWAIT: it never blocks, so it goes raw (rnic/iov.go).
	n, _, errno := unix.RawSyscall6(unix.SYS_SENDMMSG, uintptr(fd), uintptr(unsafe.Pointer(&msgs[0])), uintptr(len(msgs)),
		unix.MSG_DONTWAIT, 0, 0)
	if errno != 0 {
		return 0, errno
	}
	return int(n), nil
}

// SysRecvmmsg receives up to len(msgs) datagrams with one recvmmsg(2)
// (MSG_DONTWAIT) and returns how many it got.
func SysRecvmmsg(fd int, msgs []unix.Mmsghdr) (int, error) {
	if len(msgs) == 0 {
		return 0, nil
	}
	n, _, errno := unix.RawSyscall6(unix.SYS_RECVMMSG, uintptr(fd), uintptr(unsafe.Pointer(&msgs[0])), uintptr(len(msgs)),
		unix.MSG_DONTWAIT, 0, 0)
	if errno != 0 {
		return 0, errno
	}
	return int(n), nil
}

// setIov points iov at b (which must not be empty).
func setIov(iov *unix.Iovec, b []byte) {
	iov.Base = &b[0]
	iov.SetLen(len(b))
}

// PutSockaddr writes a in the kernel's sockaddr_in / sockaddr_in6 form into
// raw and returns its length.
func PutSockaddr(raw *unix.RawSockaddrInet6, a netip.AddrPort) uint32 {
	ip := a.Addr()
	b := (*[unix.SizeofSockaddrInet6]byte)(unsafe.Pointer(raw))
	clear(b[:])
	binary.BigEndian.PutUint16(b[2:4], a.Port())
	if ip.Is4() || ip.Is4In6() {
		binary.NativeEndian.PutUint16(b[0:2], unix.AF_INET)
		v4 := ip.Unmap().As4()
		copy(b[4:8], v4[:])
		return unix.SizeofSockaddrInet4
	}
	binary.NativeEndian.PutUint16(b[0:2], unix.AF_INET6)
	v6 := ip.As16()
	copy(b[8:24], v6[:])
	return unix.SizeofSockaddrInet6
}

// GetSockaddr reads a source address the kernel wrote into raw (n octets).
func GetSockaddr(raw *unix.RawSockaddrInet6, n uint32) netip.AddrPort {
	b := (*[unix.SizeofSockaddrInet6]byte)(unsafe.Pointer(raw))
	if n < 4 {
		return netip.AddrPort{}
	}
	port := binary.BigEndian.Uint16(b[2:4])
	switch binary.NativeEndian.Uint16(b[0:2]) {
	case unix.AF_INET:
		if n >= unix.SizeofSockaddrInet4 {
			return netip.AddrPortFrom(netip.AddrFrom4([4]byte(b[4:8])), port)
		}
	case unix.AF_INET6:
		if n >= unix.SizeofSockaddrInet6 {
			return netip.AddrPortFrom(netip.AddrFrom16([16]byte(b[8:24])).Unmap(), port)
		}
	}
	return netip.AddrPort{}
}

// putSegmentCmsg writes a SOL_UDP/UDP_SEGMENT control message (the GSO
// segment size) into b (cmsgUDPLen octets, 8-aligned) and returns its length.
func putSegmentCmsg(b []byte, size uint16) int {
	h := (*unix.Cmsghdr)(unsafe.Pointer(&b[0]))
	h.Level = unix.SOL_UDP
	h.Type = unix.UDP_SEGMENT
	h.SetLen(unix.CmsgLen(2))
	binary.NativeEndian.PutUint16(b[unix.SizeofCmsghdr:], size)
	return unix.CmsgSpace(2)
}

// GROSegmentSize returns the UDP_GRO segment size found in the control
// messages b (the first n octets the kernel wrote), or 0.
func GROSegmentSize(b []byte, n int) int {
	b = b[:min(n, len(b))]
	for len(b) >= unix.SizeofCmsghdr {
		h := (*unix.Cmsghdr)(unsafe.Pointer(&b[0]))
		l := int(h.Len)
		if l < unix.SizeofCmsghdr || l > len(b) {
			return 0
		}
		if h.Level == unix.SOL_UDP && h.Type == unix.UDP_GRO && l >= unix.SizeofCmsghdr+4 {
			return int(binary.NativeEndian.Uint32(b[unix.SizeofCmsghdr:]))
		}
		sp := (l + 7) &^ 7
		if sp >= len(b) {
			return 0
		}
		b = b[sp:]
	}
	return 0
}

// GSORefused reports whether err from a UDP_SEGMENT send means the kernel
// or the route cannot do UDP GSO (rather than a fault of the datagram).
func GSORefused(err error) bool {
	return errors.Is(err, unix.EIO) || errors.Is(err, unix.EINVAL) || errors.Is(err, unix.ENOPROTOOPT) ||
		errors.Is(err, unix.EOPNOTSUPP) || errors.Is(err, unix.EMSGSIZE)
}

// TransientSendError reports whether a send should simply be retried later
// (socket buffer full, interrupted).
func TransientSendError(err error) bool {
	return errors.Is(err, unix.EAGAIN) || errors.Is(err, unix.ENOBUFS) || errors.Is(err, unix.EINTR)
}

// initSocket sets the per-socket options of the fast path on a QP's socket:
// UDP_GRO when enabled (the kernel may then hand over several datagrams of
// one flow as one buffer, with their size in a UDP_GRO control message).
// A kernel without UDP GRO is not an error: the QP runs without it.
func (e *Engine) initSocket(q *QP) {
	q.Gso = e.Cfg.GSO
	if e.Cfg.GRO {
		if err := unix.SetsockoptInt(q.FD, unix.SOL_UDP, unix.UDP_GRO, 1); err != nil {
			e.count(q, rnic.CGROUnavailable, 1)
		}
	}
}
