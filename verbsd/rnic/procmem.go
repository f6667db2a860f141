package rnic

import (
	"errors"
	"fmt"
	"sync/atomic"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// Memory a client process owns (heap, stack, static data), registered with
// RegMRRequest.Process (docs/memory-registration.md). The daemon cannot map
// it; it reads and writes it with process_vm_readv(2) and
// process_vm_writev(2) on the session's verified peer:
//
//   - the peer is the process that connected the session's socket:
//     SO_PEERCRED (socket(7)) names it, and a pidfd (pidfd_open(2)) pins its
//     identity. SO_PEERPIDFD (Linux 6.5) gives the pidfd of the connecting
//     process itself; older kernels fall back to pidfd_open of the
//     SO_PEERCRED pid at Hello.
//   - before an access the pidfd is polled (at most once per
//     peerCheckEvery): once the process has exited (POLLIN on a pidfd,
//     pidfd_open(2)) the session's process memory is gone and every access
//     fails, so a pid reused by another process is never read or written.
//     Linux hands out pids cyclically: a pid is reused only after the
//     whole pid space (pid_max, 4 194 304 on 64-bit) has been gone through
//     since, which no machine forks in the window between a poll and an
//     access (a poll per access cost one system call per buffer: 0.3 µs of
//     the 6 µs a 64-octet UD message on process memory costs more).
//   - the kernel checks, on every call, that the daemon may ptrace the peer
//     (PTRACE_MODE_ATTACH_REALCREDS, ptrace(2) "Ptrace access mode
//     checking"): a root daemon needs CAP_SYS_PTRACE (the systemd unit
//     grants it and nothing else for this); a daemon of the client's own
//     user needs no capability unless Yama's ptrace_scope is 1 or more
//     (then CAP_SYS_PTRACE, or the client names the daemon with
//     prctl(PR_SET_PTRACER)). A refusal fails the registration with EPERM.
//
// A range unmapped while registered makes process_vm_* stop short or fail
// with EFAULT: the work request touching it completes with a local
// protection error, a remote access gets the RFC 5040 access error (a
// Terminate on RC); the daemon never faults on it.

// soPeerPidfd is SO_PEERPIDFD (Linux 6.5, include/uapi/asm-generic/socket.h).
const soPeerPidfd = 77

// PeerProcess is a session's client process.
type PeerProcess struct {
	pid       int
	pidfd     int
	checkedAt atomic.Int64 // monotonic ns of the last poll that found it alive
}

// peerCheckEvery bounds how long an access relies on an earlier poll.
const peerCheckEvery = time.Millisecond

// monoStart is the origin of PeerProcess.checkedAt.
var monoStart = time.Now()

// openPeer pins the process on the other end of the connected Unix socket
// fd (SO_PEERCRED pid cred.Pid).
func openPeer(fd int, pid int32) (*PeerProcess, error) {
	pfd, err := unix.GetsockoptInt(fd, unix.SOL_SOCKET, soPeerPidfd)
	if err != nil {
		// Before Linux 6.5: the pid SO_PEERCRED reported at connect.
		if pfd, err = unix.PidfdOpen(int(pid), 0); err != nil {
			return nil, fmt.Errorf("pidfd_open(%d): %w", pid, err)
		}
	}
	unix.CloseOnExec(pfd)
	p := &PeerProcess{pid: int(pid), pidfd: pfd}
	p.checkedAt.Store(-int64(time.Hour)) // never polled
	return p, nil
}

// alive reports that the peer has not exited (its pidfd is not readable).
func (p *PeerProcess) alive() bool {
	if p == nil || p.pidfd < 0 {
		return false
	}
	// A signal pending on the engine's thread (Go's preemption signal,
	// SIGURG) makes a ppoll that finds nothing ready fail with EINTR: ask
	// again, a bounded number of times.
	for range 64 {
		pfd := unix.PollFd{Fd: int32(p.pidfd), Events: unix.POLLIN}
		n, _, errno := unix.RawSyscall6(unix.SYS_PPOLL, uintptr(unsafe.Pointer(&pfd)), 1, uintptr(unsafe.Pointer(&zeroTimespec)), 0, 0, 0)
		if errno == unix.EINTR {
			continue
		}
		return errno == 0 && n == 0
	}
	return false
}

// Close releases the pidfd (nil-safe, idempotent).
func (p *PeerProcess) Close() {
	if p != nil && p.pidfd >= 0 {
		unix.Close(p.pidfd)
		p.pidfd = -1
	}
}

// errPeerGone: the session's process exited.
var errPeerGone = Errf(unix.ESRCH, "the client process has exited")

// access reads (write false) or writes n = len(b) octets at addr of the
// peer's address space. A short transfer (part of the range unmapped) is
// EFAULT.
func (p *PeerProcess) access(b []byte, addr uint64, write bool) error {
	if len(b) == 0 {
		return nil
	}
	now := int64(time.Since(monoStart))
	if now-p.checkedAt.Load() >= int64(peerCheckEvery) {
		if !p.alive() {
			return errPeerGone
		}
		p.checkedAt.Store(now)
	}
	local := []unix.Iovec{{Base: &b[0]}}
	local[0].SetLen(len(b))
	remote := []unix.RemoteIovec{{Base: uintptr(addr), Len: len(b)}}
	var n int
	var err error
	if write {
		n, err = unix.ProcessVMWritev(p.pid, local, remote, 0)
	} else {
		n, err = unix.ProcessVMReadv(p.pid, local, remote, 0)
	}
	switch {
	case err != nil:
		return err
	case n != len(b):
		return unix.EFAULT
	}
	return nil
}

// ProcRegion is registered memory in the peer's address space: the region
// form of a process MR (rnic/memory.go has the memfd form, mapping).
type ProcRegion struct {
	Peer   *PeerProcess
	Addr   uint64
	Length uint64
}

// ReadAt reads len(b) octets at offset off of the region.
func (r *ProcRegion) ReadAt(b []byte, off uint64) error {
	if off > r.Length || uint64(len(b)) > r.Length-off {
		return unix.EFAULT
	}
	return r.Peer.access(b, r.Addr+off, false)
}

// WriteAt writes b at offset off of the region.
func (r *ProcRegion) WriteAt(b []byte, off uint64) error {
	if off > r.Length || uint64(len(b)) > r.Length-off {
		return unix.EFAULT
	}
	return r.Peer.access(b, r.Addr+off, true)
}

// probe checks that the first and last octets of [off, off+n) of the
// region are readable (one process_vm_readv), without reading the rest.
func (r *ProcRegion) probe(off, n uint64) error {
	if n == 0 {
		return nil
	}
	if off > r.Length || n > r.Length-off {
		return unix.EFAULT
	}
	now := int64(time.Since(monoStart))
	if now-r.Peer.checkedAt.Load() >= int64(peerCheckEvery) {
		if !r.Peer.alive() {
			return errPeerGone
		}
		r.Peer.checkedAt.Store(now)
	}
	var b [2]byte
	local := []unix.Iovec{{Base: &b[0]}}
	local[0].SetLen(2)
	remote := []unix.RemoteIovec{{Base: uintptr(r.Addr + off), Len: 1}, {Base: uintptr(r.Addr + off + n - 1), Len: 1}}
	got, err := unix.ProcessVMReadv(r.Peer.pid, local, remote, 0)
	switch {
	case err != nil:
		return err
	case got != 2:
		return unix.EFAULT
	}
	return nil
}

// ProbeProcessRange checks at registration that the daemon may reach
// [addr, addr+length) of the peer: its first and last octets are readable
// (a verbs registration pins its pages; this catches an unmapped range and
// a ptrace refusal at once, with a message saying what to do).
func ProbeProcessRange(p *PeerProcess, addr, length uint64) error {
	var b [1]byte
	for _, a := range []uint64{addr, addr + length - 1} {
		err := p.access(b[:], a, false)
		switch {
		case err == nil:
		case errors.Is(err, unix.EPERM):
			return Errf(unix.EPERM, "reg-mr: the daemon may not read this process's memory (process_vm_readv: %v): "+
				"run iwarpd as root with CAP_SYS_PTRACE (contrib/systemd/iwarpd.service), or as this user with "+
				"Yama ptrace_scope 0; see docs/memory-registration.md", err)
		case errors.Is(err, unix.ESRCH):
			return Errf(unix.ESRCH, "reg-mr: %v", err)
		default:
			return Errf(unix.EFAULT, "reg-mr: octet %#x of the range is not mapped in this process (%v)", a, err)
		}
	}
	return nil
}
