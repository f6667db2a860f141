package rnic

import (
	"fmt"
	"math"
	"strings"
	"unsafe"

	"golang.org/x/sys/unix"
)

// Mapping is a part of a client's sealed memfd region mapped read-write in
// the daemon. Only the pages needed are mapped, so a client cannot make the
// daemon map a huge sparse file to register a few octets.
type Mapping struct {
	fd    int
	Pages []byte // the whole mapping (page aligned)
	Mem   []byte // the octets asked for, inside pages
}

// MapRegion checks that fd is memory whose pages cannot vanish under the
// daemon (checkClientMemory), at least off+length octets long, with every
// page of [off, off+length) allocated by the client (checkNoHoles), and
// maps that range guarded against holes (guardHoles: the daemon never
// allocates a page of it, rnic/holeguard.go). It takes ownership of fd.
func MapRegion(fd int, off, length uint64) (*Mapping, error) {
	fail := func(err error) (*Mapping, error) {
		unix.Close(fd)
		return nil, err
	}
	if length == 0 || off > math.MaxInt64-length || length > 1<<40 {
		return fail(Errf(unix.EINVAL, "region range [%d, +%d) is empty or too large", off, length))
	}
	size, err := checkClientMemory(fd)
	if err != nil {
		return fail(err)
	}
	if size < off+length {
		return fail(Errf(unix.EINVAL, "region of %d octets does not hold [%d, %d)", size, off, off+length))
	}
	page := uint64(unix.Getpagesize())
	start := off &^ (page - 1)
	end := (off + length + page - 1) &^ (page - 1)
	// Only pages the client has allocated, now and later (rnic/holeguard.go).
	if err := checkNoHoles(fd, start, end, size); err != nil {
		return fail(err)
	}
	// Never MAP_POPULATE client memory: populating a
	// shared mapping allocates every page of the file, so a client's 2 GiB
	// sparse memfd cost the daemon 2 GiB (charged to its cgroup) for a
	// client that had touched 5 MB. Only the pages the file already has
	// get page tables now (prefaultResident); the others are faulted in
	// as the data path touches them.
	pages, err := unix.Mmap(fd, int64(start), int(end-start), unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		return fail(Errf(unix.ENOMEM, "mapping %d octets: %v", end-start, err))
	}
	if err := guardHoles(pages); err != nil && err != errNoHoleGuard {
		unix.Munmap(pages)
		return fail(err)
	}
	prefaultResident(pages)
	lo := off - start
	return &Mapping{fd: fd, Pages: pages, Mem: pages[lo : lo+length : lo+length]}, nil
}

// checkClientMemory accepts only descriptors whose pages cannot vanish
// while the daemon has them mapped, and returns the file's size (a client that backed a CQ ring with an MFD_HUGETLB memfd and
// punched its page out killed the daemon with SIGBUS on its next CQE):
//   - a memfd (memfd_create(2); /proc/self/fd names it "/memfd:..."), not
//     any other file, socket or device;
//   - on tmpfs (fstatfs(2) f_type TMPFS_MAGIC): a hugetlbfs memfd
//     (MFD_HUGETLB, HUGETLBFS_MAGIC) is refused, because a hole punched in
//     it (fallocate(2) FALLOC_FL_PUNCH_HOLE) is refilled on fault only
//     while the huge page pool has a free page, else the access is SIGBUS;
//     a shmem hole is refilled with a zeroed page on every fault;
//   - sealed against shrinking and growing (F_SEAL_SHRINK | F_SEAL_GROW,
//     fcntl(2) "File Sealing"), so that no access inside the size checked
//     here can fall past the end of the file (SIGBUS too).
//
// Whatever slips through (a fault is still possible, for example a page the
// kernel cannot allocate) fails the client's session, not the daemon: the
// goroutines that touch client memory run with debug.SetPanicOnFault
// (rnic/engine.go, rnic/session.go).
func checkClientMemory(fd int) (uint64, error) {
	buf := make([]byte, 64)
	n, err := unix.Readlink(fmt.Sprintf("/proc/self/fd/%d", fd), buf)
	if err != nil {
		return 0, Errf(unix.EINVAL, "memory descriptor: %v", err)
	}
	if !strings.HasPrefix(string(buf[:n]), "/memfd:") {
		return 0, Errf(unix.EINVAL, "memory descriptor is %q, not a memfd; create shared memory with memfd_create(2) (shm.Create)", buf[:n])
	}
	var fs unix.Statfs_t
	if err := unix.Fstatfs(fd, &fs); err != nil {
		return 0, Errf(unix.EINVAL, "fstatfs on the memory descriptor: %v", err)
	}
	if fs.Type == unix.HUGETLBFS_MAGIC {
		return 0, Errf(unix.EINVAL, "memory is a hugetlb memfd (MFD_HUGETLB): refused, its pages can vanish (a punched hole faults with SIGBUS); use a plain memfd")
	}
	if fs.Type != unix.TMPFS_MAGIC {
		return 0, Errf(unix.EINVAL, "memfd on file system type %#x, not tmpfs: refused", fs.Type)
	}
	seals, err := unix.FcntlInt(uintptr(fd), unix.F_GET_SEALS, 0)
	if err != nil {
		return 0, Errf(unix.EINVAL, "descriptor is not a sealed memfd (%v); create regions with shm.Create", err)
	}
	if seals&(unix.F_SEAL_SHRINK|unix.F_SEAL_GROW) != unix.F_SEAL_SHRINK|unix.F_SEAL_GROW {
		return 0, Errf(unix.EINVAL, "memfd is not sealed against resizing (F_SEAL_SHRINK|F_SEAL_GROW); create regions with shm.Create")
	}
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return 0, Errf(unix.EINVAL, "fstat region: %v", err)
	}
	if st.Size < 0 {
		return 0, Errf(unix.EINVAL, "memfd of negative size %d", st.Size)
	}
	return uint64(st.Size), nil
}

// prefaultResident fills the daemon's page tables for the pages of a
// fresh shared mapping that the file already holds, without allocating
// any other: mincore(2) reports which pages of the file are in memory
// (for a file mapping it reports the page cache, whether or not this
// process maps them), and madvise(MADV_POPULATE_WRITE) (Linux 5.14) maps
// each run of them. A verbs registration pins its pages; here the client
// does the allocating (ofverbs populates what it registers), and the
// daemon's data path then takes no page fault per 4 KiB on them (16,384
// faults, a third of the receiving engine's time, in the first pass over
// a 64 MiB buffer with no prefault at all). Best effort: on an older
// kernel the pages fault in on first use.
func prefaultResident(pages []byte) {
	page := unix.Getpagesize()
	const chunk = 1 << 16 // pages per mincore call: a 64 KiB vector
	vec := make([]byte, min(chunk, len(pages)/page))
	for base := 0; base < len(pages); base += chunk * page {
		part := pages[base:min(len(pages), base+chunk*page)]
		v := vec[:len(part)/page]
		if _, _, errno := unix.Syscall(unix.SYS_MINCORE, uintptr(unsafe.Pointer(&part[0])), uintptr(len(part)),
			uintptr(unsafe.Pointer(&v[0]))); errno != 0 {
			return
		}
		for i := 0; i < len(v); {
			if v[i]&1 == 0 {
				i++
				continue
			}
			j := i
			for j < len(v) && v[j]&1 != 0 {
				j++
			}
			if unix.Madvise(part[i*page:j*page], unix.MADV_POPULATE_WRITE) != nil {
				return
			}
			i = j
		}
	}
}

// Close unmaps and closes (nil-safe, idempotent).
func (m *Mapping) Close() {
	if m == nil || m.fd < 0 {
		return
	}
	unix.Munmap(m.Pages)
	unix.Close(m.fd)
	m.fd, m.Pages, m.Mem = -1, nil, nil
}

// CheckEventFD accepts only an eventfd as a completion channel: the engine
// writes to it and must know what it is writing to.
func CheckEventFD(fd int) error {
	buf := make([]byte, 64)
	n, err := unix.Readlink(fmt.Sprintf("/proc/self/fd/%d", fd), buf)
	if err != nil {
		return Errf(unix.EINVAL, "completion channel descriptor: %v", err)
	}
	if string(buf[:n]) != "anon_inode:[eventfd]" {
		return Errf(unix.EINVAL, "completion channel descriptor is %q, not an eventfd", buf[:n])
	}
	return nil
}
