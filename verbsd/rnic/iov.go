package rnic

import (
	"encoding/binary"
	"unsafe"

	"github.com/iwarpd/iwarpd/internal/crc32c"
	"golang.org/x/sys/unix"
)

// Raw system calls of the engine's data path. The engine goroutine is
// locked to its thread and its sockets are non-blocking, so its readv,
// writev and zero-timeout epoll_wait never block: they go through
// unix.RawSyscall, without the scheduler's entersyscall/exitsyscall. With
// them, a call longer than one sysmon tick (20 µs: a 64 KiB writev or
// readv on loopback) lets sysmon take the engine's P away when GOMAXPROCS
// is 1 (a daemon pinned to one CPU, as iwarp-bench runs it), and keeps
// sysmon waking every 20 µs on the engine's own CPU. Measured on a 2000 ×
// 1 MiB RC Write stream (iwarp-perf, loopback): voluntary context switches of
// both daemons 20–26 k → 5.4–9.3 k, their CPU time 2.2–2.55 s → 1.7–2.2 s.
// Calls that may block (epoll_wait with a timeout) keep the hooks, so that
// the other goroutines and the GC can run while the engine sleeps.

// AppendIovecs appends to iov an iovec for each non-empty slice of bufs.
// The memory the iovecs point at must stay reachable from elsewhere
// (registered memory, or buffers owned by the connection) until the
// system call returns.
func AppendIovecs(iov []unix.Iovec, bufs ...[]byte) []unix.Iovec {
	for _, b := range bufs {
		if len(b) == 0 {
			continue
		}
		v := unix.Iovec{Base: &b[0]}
		v.SetLen(len(b))
		iov = append(iov, v)
	}
	return iov
}

// RawReadv is readv(2) on a non-blocking descriptor (see above). It
// returns 0, nil for an empty iov.
func RawReadv(fd int, iov []unix.Iovec) (int, error) {
	if len(iov) == 0 {
		return 0, nil
	}
	n, _, errno := unix.RawSyscall(unix.SYS_READV, uintptr(fd), uintptr(unsafe.Pointer(&iov[0])), uintptr(len(iov)))
	if errno != 0 {
		return 0, errno
	}
	return int(n), nil
}

// RawWritev is writev(2) on a non-blocking descriptor (see above). It
// returns 0, nil for an empty iov.
func RawWritev(fd int, iov []unix.Iovec) (int, error) {
	if len(iov) == 0 {
		return 0, nil
	}
	n, _, errno := unix.RawSyscall(unix.SYS_WRITEV, uintptr(fd), uintptr(unsafe.Pointer(&iov[0])), uintptr(len(iov)))
	if errno != 0 {
		return 0, errno
	}
	return int(n), nil
}

// RawEpollPoll is epoll_wait(2) with a zero timeout (it never blocks; see
// above).
func RawEpollPoll(epfd int, events []unix.EpollEvent) (int, error) {
	if len(events) == 0 {
		return 0, nil
	}
	n, _, errno := unix.RawSyscall6(unix.SYS_EPOLL_PWAIT, uintptr(epfd), uintptr(unsafe.Pointer(&events[0])),
		uintptr(len(events)), 0, 0, 0)
	if errno != 0 {
		return 0, errno
	}
	return int(n), nil
}

// AppendRange appends to dst the sub-slices of pieces that cover octets
// [off, off+n) of their concatenation (no copy). Octets beyond the pieces
// are silently not covered: callers pass ranges inside them.
func AppendRange(dst [][]byte, pieces [][]byte, off, n int) [][]byte {
	for _, p := range pieces {
		if n <= 0 {
			break
		}
		if off >= len(p) {
			off -= len(p)
			continue
		}
		k := min(len(p)-off, n)
		dst = append(dst, p[off:off+k])
		n -= k
		off = 0
	}
	return dst
}

// CopyRange copies octets [off, off+len(dst)) of the concatenation of
// pieces into dst and returns how many it copied.
func CopyRange(dst []byte, pieces [][]byte, off int) int {
	done := 0
	for _, p := range pieces {
		if done == len(dst) {
			break
		}
		if off >= len(p) {
			off -= len(p)
			continue
		}
		done += copy(dst[done:], p[off:])
		off = 0
	}
	return done
}

// Scatter copies src into the pieces in order and returns how many octets
// fitted.
func Scatter(pieces [][]byte, src []byte) int {
	done := 0
	for _, p := range pieces {
		if done == len(src) {
			break
		}
		done += copy(p, src[done:])
	}
	return done
}

// ChecksumRange returns the CRC32c of octets [0, n) of the concatenation of
// pieces.
func ChecksumRange(pieces [][]byte, n int) uint32 {
	var c uint32
	for _, p := range pieces {
		if n <= 0 {
			break
		}
		k := min(len(p), n)
		c = crc32c.Update(c, p[:k])
		n -= k
	}
	return c
}

// TrailerAt reads the little-endian CRC trailer at octet off of pieces.
func TrailerAt(pieces [][]byte, off int) uint32 {
	var b [crc32c.Size]byte
	CopyRange(b[:], pieces, off)
	return binary.LittleEndian.Uint32(b[:])
}

// CopyBetween copies n octets at offset off of the concatenation of src
// into the concatenation of dst (from its start) and returns how many it
// copied (fewer when either runs out).
func CopyBetween(dst, src [][]byte, off, n int) int {
	done, di, dOff := 0, 0, 0
	for _, p := range src {
		if done == n || di == len(dst) {
			break
		}
		if off >= len(p) {
			off -= len(p)
			continue
		}
		p = p[off:min(len(p), off+n-done)]
		off = 0
		for len(p) > 0 && di < len(dst) {
			k := copy(dst[di][dOff:], p)
			p = p[k:]
			done += k
			dOff += k
			if dOff == len(dst[di]) {
				di, dOff = di+1, 0
			}
		}
	}
	return done
}
