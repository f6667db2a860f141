package rnic

import (
	"errors"
	"fmt"
	"sync"
	"unsafe"

	"golang.org/x/sys/unix"
)

// Holes in client memory (issue 18, defect 3). The daemon maps the
// clients' memfds (registered memory, rings). A page of a shmem file that
// is not present (never written, or punched out by fallocate(2)
// FALLOC_FL_PUNCH_HOLE / madvise(2) MADV_REMOVE) is allocated by whoever
// faults on it, and charged to that process's memory cgroup: a client
// that registered 1 GiB, punched it out and sent itself Write-Records
// made the daemon allocate 1 GiB (RSS 24 -> 1,072 MB) while its own RSS
// was 5 MB.
//
// Two rules keep every page the daemon touches the client's:
//
//   - refused while not present, at registration: the range must hold no
//     hole (lseek(2) SEEK_HOLE on the memfd; a swapped-out page is data,
//     not a hole). The client allocates its pages (ofverbs and libiwverbs
//     populate every region they create);
//   - refused while not present, afterwards: the daemon's mapping of the
//     range is registered with a userfaultfd in missing mode with
//     UFFD_FEATURE_SIGBUS (userfaultfd(2), ioctl_userfaultfd(2)). A fault
//     on a page that is present maps it; a fault on a hole is a "missing"
//     fault, which the kernel answers with SIGBUS instead of allocating a
//     page: in the daemon's own code a run-time panic that rnic/fault.go
//     contains (the session whose memory it is fails), in a system call
//     that copies to or from the mapping (readv, recvmmsg, sendmmsg) the
//     call fails with EFAULT, which the data path treats as a local
//     protection error of that work request, as for process memory.
//     Punching a hole after registration unmaps the page from the
//     daemon's mapping too (the kernel zaps every mapping of the file), so
//     the next access is a missing fault again: the rule holds whatever the
//     client does later. Seals could not give this: only F_SEAL_WRITE
//     (which forbids the client's own writes) stops PUNCH_HOLE.
//
// The userfaultfd is opened once, through /dev/userfaultfd (Linux 6.1;
// access by its file mode, root's by default), else the userfaultfd(2)
// system call (CAP_SYS_PTRACE or vm.unprivileged_userfaultfd=1; never
// UFFD_USER_MODE_ONLY, which would let the kernel's own copies allocate).
// Without either the daemon still refuses holes at registration, says at
// start that a client can charge it for pages it punches later, and goes
// on (docs/security.md).

// From linux/userfaultfd.h.
const (
	uffdAPIVersion          = 0xAA
	uffdFeatureSigbus       = 1 << 7
	uffdRegisterModeMissing = 1
	uffdioAPI               = 0xC018AA3F // _IOWR(0xAA, 0x3F, struct uffdio_api)
	uffdioRegister          = 0xC020AA00 // _IOWR(0xAA, 0x00, struct uffdio_register)
	userfaultfdIOCNew       = 0xAA00     // _IO(0xAA, 0x00), on /dev/userfaultfd
)

var holeGuard struct {
	once sync.Once
	fd   int
	how  string // how it was opened, for the start log
	err  error
}

// HoleGuard opens the daemon's userfaultfd (once) and says how, or why
// not; without it the daemon runs on (see above).
func HoleGuard() (string, error) {
	holeGuard.once.Do(openHoleGuard)
	return holeGuard.how, holeGuard.err
}

func openHoleGuard() {
	g := &holeGuard
	g.fd = -1
	flags := uintptr(unix.O_CLOEXEC | unix.O_NONBLOCK)
	var devErr error
	if dev, err := unix.Open("/dev/userfaultfd", unix.O_RDWR|unix.O_CLOEXEC, 0); err == nil {
		fd, _, errno := unix.Syscall(unix.SYS_IOCTL, uintptr(dev), userfaultfdIOCNew, flags)
		unix.Close(dev)
		if errno == 0 {
			g.fd, g.how = int(fd), "/dev/userfaultfd"
		} else {
			devErr = fmt.Errorf("USERFAULTFD_IOC_NEW: %w", errno)
		}
	} else {
		devErr = err
	}
	if g.fd < 0 {
		fd, _, errno := unix.Syscall(unix.SYS_USERFAULTFD, flags, 0, 0)
		if errno != 0 {
			g.err = fmt.Errorf("no userfaultfd: /dev/userfaultfd: %v; userfaultfd(2): %w (needs CAP_SYS_PTRACE or "+
				"vm.unprivileged_userfaultfd=1)", devErr, errno)
			return
		}
		g.fd, g.how = int(fd), "userfaultfd(2)"
	}
	api := struct{ api, features, ioctls uint64 }{api: uffdAPIVersion, features: uffdFeatureSigbus}
	if _, _, errno := unix.Syscall(unix.SYS_IOCTL, uintptr(g.fd), uffdioAPI, uintptr(unsafe.Pointer(&api))); errno != 0 {
		unix.Close(g.fd)
		g.fd = -1
		g.err = fmt.Errorf("UFFDIO_API with UFFD_FEATURE_SIGBUS (Linux 4.14): %w", errno)
		return
	}
	g.how += ", missing-page faults raise SIGBUS"
}

// errNoHoleGuard: mappings are not guarded (HoleGuard says why).
var errNoHoleGuard = errors.New("no hole guard")

// guardHoles registers pages (a fresh shared mapping of a client memfd)
// with the userfaultfd, so that no access of the daemon's ever fills a
// hole in it. The registration ends with the mapping (munmap).
func guardHoles(pages []byte) error {
	if _, err := HoleGuard(); err != nil {
		return errNoHoleGuard
	}
	reg := struct {
		start, len, mode, ioctls uint64
	}{start: uint64(uintptr(unsafe.Pointer(unsafe.SliceData(pages)))), len: uint64(len(pages)), mode: uffdRegisterModeMissing}
	if _, _, errno := unix.Syscall(unix.SYS_IOCTL, uintptr(holeGuard.fd), uffdioRegister, uintptr(unsafe.Pointer(&reg))); errno != 0 {
		return Errf(unix.ENOMEM, "guarding the mapping of client memory against holes (UFFDIO_REGISTER): %v", errno)
	}
	return nil
}

// checkNoHoles fails with EFAULT if [start, end) of the memfd of size
// octets holds a hole: a page the client never wrote or punched out.
func checkNoHoles(fd int, start, end, size uint64) error {
	end = min(end, size)
	if start >= end {
		return nil
	}
	hole, err := unix.Seek(fd, int64(start), unix.SEEK_HOLE)
	if err != nil {
		return Errf(unix.EINVAL, "lseek SEEK_HOLE on the memfd: %v", err)
	}
	if uint64(hole) < end {
		stop := end
		if data, err := unix.Seek(fd, hole, unix.SEEK_DATA); err == nil && uint64(data) < end {
			stop = uint64(data)
		}
		return Errf(unix.EFAULT, "memfd octets [%d, %d) are not allocated (never written, or punched out): the daemon does "+
			"not allocate a client's memory; write every page before registering it (ofverbs AllocBuffer and "+
			"libiwverbs do), docs/memory-registration.md", hole, stop)
	}
	return nil
}
