package rnic

import (
	"errors"
	"fmt"
	"math"
	"path/filepath"
	"strconv"
	"time"

	"golang.org/x/sys/unix"
)

// Memory a client process owns (heap, stack, static data), registered with
// RegMRRequest.Process (docs/memory-registration.md). The daemon cannot map
// it; it reads and writes it through a descriptor the client hands over at
// Hello: the client's own /proc/self/mem (proc(5) "/proc/pid/mem"), opened
// O_RDWR by the client on itself.
//
//   - The kernel checks access when the file is opened (ptrace access mode
//     PTRACE_MODE_ATTACH, ptrace(2) "Ptrace access mode checking"): a
//     process opening its own mem always passes, and nobody can open
//     another process's mem unless they could ptrace it — so every
//     descriptor a client can hand over is memory it could reach itself.
//   - The open file is tied to the address space (mm) it was opened on,
//     not to a pid: after the process execs (a setuid program included) or
//     exits, the old mm is gone and reads and writes move nothing (0
//     octets; a short transfer here is EFAULT). Credential changes, a
//     non-dumpable process and pid reuse cannot be reached through it.
//   - The daemon needs no privilege for it: no CAP_SYS_PTRACE, no pidfd,
//     no pid. It uses pread(2)/pwrite(2) at offset = address, never
//     process_vm_readv/writev(2).
//   - Every access, the registration probe included, runs on the session's
//     copier thread with a bound (rnic/copier.go): a page that does not
//     come (FUSE, NFS) stalls only that session.
//
// A range unmapped while registered makes pread/pwrite stop short or fail:
// the work request touching it completes with a local protection error, a
// remote access gets the RFC 5040 access error (a Terminate on RC); the
// daemon never faults on it. pwrite through /proc/PID/mem writes with
// FOLL_FORCE, as a debugger does: a read-only page of the client is written
// all the same (copy on write) — the client's own memory, which it could
// have written itself after mprotect(2).

// procSuperMagic is PROC_SUPER_MAGIC (statfs(2), linux/magic.h).
const procSuperMagic = 0x9fa0

// CheckProcMemFD verifies that fd, handed over by a client at Hello, is a
// procfs "mem" file (/proc/PID/mem or /proc/PID/task/TID/mem) open for
// reading and writing. The kernel checked, when the client opened it, that
// the client may read and write that address space.
func CheckProcMemFD(fd int) error {
	const what = "hello: the process-memory descriptor"
	const fix = "; hand over /proc/self/mem opened O_RDWR (docs/memory-registration.md)"
	var fs unix.Statfs_t
	if err := unix.Fstatfs(fd, &fs); err != nil {
		return Errf(unix.EINVAL, "%s: fstatfs: %v%s", what, err, fix)
	}
	if fs.Type != procSuperMagic {
		return Errf(unix.EINVAL, "%s is not on procfs (file system magic %#x)%s", what, fs.Type, fix)
	}
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return Errf(unix.EINVAL, "%s: fstat: %v%s", what, err, fix)
	}
	buf := make([]byte, 256)
	n, err := unix.Readlink("/proc/self/fd/"+strconv.Itoa(fd), buf)
	if err != nil || st.Mode&unix.S_IFMT != unix.S_IFREG || filepath.Base(string(buf[:max(n, 0)])) != "mem" {
		return Errf(unix.EINVAL, "%s is not a /proc/PID/mem file (%q)%s", what, string(buf[:max(n, 0)]), fix)
	}
	fl, err := unix.FcntlInt(uintptr(fd), unix.F_GETFL, 0)
	if err != nil || fl&unix.O_ACCMODE != unix.O_RDWR {
		return Errf(unix.EINVAL, "%s is not open for reading and writing%s", what, fix)
	}
	return nil
}

// ProcMem is a session's access to its client's address space: the /proc
// mem descriptor and the copier thread that alone uses it.
type ProcMem struct {
	c *copier
}

// NewProcMem takes fd (checked by CheckProcMemFD; ProcMem owns it from
// now on) and starts its copier. Accesses wait at most bound; onStall is
// called (once, on the waiting goroutine) when one did not finish in time.
func NewProcMem(fd int, bound time.Duration, onStall func(what string)) *ProcMem {
	return &ProcMem{c: newCopier(fd, bound, onStall)}
}

// Close asks the copier to end: it closes the descriptor once no access is
// in progress. The returned channel is closed when the copier has returned
// (a copier stuck in a page fault returns when the fault does). Nil-safe.
func (p *ProcMem) Close() <-chan struct{} {
	if p == nil {
		c := make(chan struct{})
		close(c)
		return c
	}
	return p.c.close()
}

// Stalled reports that an access of this session did not finish within
// the bound: every later one fails at once (rnic/copier.go).
func (p *ProcMem) Stalled() bool { return p != nil && p.c.stalled.Load() }

// errNoProcMem: the session handed over no process-memory descriptor.
var errNoProcMem = Errf(unix.EPERM, "this session handed over no /proc/self/mem at hello (docs/memory-registration.md)")

// access reads (write false) or writes len(b) octets at addr of the
// client's address space, on the copier.
func (p *ProcMem) access(b []byte, addr uint64, write bool) error {
	if len(b) == 0 {
		return nil
	}
	if p == nil {
		return errNoProcMem
	}
	op := copyRead
	if write {
		op = copyWrite
	}
	return p.c.do(op, b, addr, 0)
}

// Probe checks that the first and last octets of [addr, addr+n) are
// readable (two 1-octet reads on the copier), without reading the rest.
func (p *ProcMem) Probe(addr, n uint64) error {
	if n == 0 {
		return nil
	}
	if p == nil {
		return errNoProcMem
	}
	return p.c.do(copyProbe, nil, addr, n)
}

// preadMem reads len(b) octets at addr of the address space behind fd on
// the calling thread (the copier's raw pread/pwrite: rnic/copier_thread.go;
// this one is the benchmark's reference); anything short of all of them is
// EFAULT (an unmapped page part way; 0 octets once the address space is
// gone: proc(5)), as memResult says for both.
func preadMem(fd int, b []byte, addr uint64) error {
	if addr > math.MaxInt64-uint64(len(b)) {
		return unix.EFAULT
	}
	n, err := unix.Pread(fd, b, int64(addr))
	return memResult(n, len(b), err)
}

func memResult(n, want int, err error) error {
	switch {
	case errors.Is(err, unix.EIO), err == nil && n != want:
		// mem_rw (fs/proc/base.c) reports a page it cannot reach as EIO.
		return unix.EFAULT
	case err != nil:
		return err
	}
	return nil
}

// ProcRegion is registered memory in the client's address space: the
// region form of a process MR (rnic/memory.go has the memfd form, mapping).
type ProcRegion struct {
	Mem    *ProcMem
	Addr   uint64
	Length uint64
}

// ReadAt reads len(b) octets at offset off of the region.
func (r *ProcRegion) ReadAt(b []byte, off uint64) error {
	if off > r.Length || uint64(len(b)) > r.Length-off {
		return unix.EFAULT
	}
	return r.Mem.access(b, r.Addr+off, false)
}

// WriteAt writes b at offset off of the region.
func (r *ProcRegion) WriteAt(b []byte, off uint64) error {
	if off > r.Length || uint64(len(b)) > r.Length-off {
		return unix.EFAULT
	}
	return r.Mem.access(b, r.Addr+off, true)
}

// probe checks that the first and last octets of [off, off+n) of the
// region are readable.
func (r *ProcRegion) probe(off, n uint64) error {
	if n == 0 {
		return nil
	}
	if off > r.Length || n > r.Length-off {
		return unix.EFAULT
	}
	return r.Mem.Probe(r.Addr+off, n)
}

// ProbeProcessRange checks at registration that [addr, addr+length) of
// the session's process memory is reachable: its first and last octets
// are readable (a verbs registration pins its pages; this catches an
// unmapped range at once), on the copier with its bound, so only this
// session's request waits for a page that does not come.
func ProbeProcessRange(p *ProcMem, addr, length uint64) error {
	if p == nil {
		return Errf(unix.EPERM, "reg-mr: process memory: %v", errNoProcMem)
	}
	err := p.Probe(addr, length)
	switch {
	case err == nil:
		return nil
	case errors.Is(err, errStalled):
		return Errf(unix.EAGAIN, "reg-mr: %v", err)
	default:
		return Errf(unix.EFAULT, "reg-mr: [%#x, %#x) is not all mapped in the process that opened this session (%v)",
			addr, addr+length, err)
	}
}

// String names the descriptor for logs.
func (p *ProcMem) String() string {
	if p == nil {
		return "none"
	}
	return fmt.Sprintf("fd %d", p.c.fd)
}
