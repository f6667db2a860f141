package verbsd

import (
	"fmt"
	"math"

	"golang.org/x/sys/unix"
)

// mapping is a part of a client's sealed memfd region mapped read-write in
// the daemon. Only the pages needed are mapped, so a client cannot make the
// daemon map a huge sparse file to register a few octets.
type mapping struct {
	fd    int
	pages []byte // the whole mapping (page aligned)
	mem   []byte // the octets asked for, inside pages
}

// mapRegion checks that fd is a memfd sealed against shrinking and growing
// (so that the daemon can never fault on it) and at least off+length
// octets long, and maps [off, off+length). It takes ownership of fd.
func mapRegion(fd int, off, length uint64) (*mapping, error) {
	fail := func(err error) (*mapping, error) {
		unix.Close(fd)
		return nil, err
	}
	if length == 0 || off > math.MaxInt64-length || length > 1<<40 {
		return fail(errf(unix.EINVAL, "region range [%d, +%d) is empty or too large", off, length))
	}
	seals, err := unix.FcntlInt(uintptr(fd), unix.F_GET_SEALS, 0)
	if err != nil {
		return fail(errf(unix.EINVAL, "descriptor is not a sealed memfd (%v); create regions with shm.Create", err))
	}
	if seals&(unix.F_SEAL_SHRINK|unix.F_SEAL_GROW) != unix.F_SEAL_SHRINK|unix.F_SEAL_GROW {
		return fail(errf(unix.EINVAL, "region is not sealed against resizing; create regions with shm.Create"))
	}
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return fail(errf(unix.EINVAL, "fstat region: %v", err))
	}
	if st.Size < 0 || uint64(st.Size) < off+length {
		return fail(errf(unix.EINVAL, "region of %d octets does not hold [%d, %d)", st.Size, off, off+length))
	}
	page := uint64(unix.Getpagesize())
	start := off &^ (page - 1)
	end := (off + length + page - 1) &^ (page - 1)
	// MAP_POPULATE: the page tables are filled now, as a verbs
	// registration pins its pages, instead of one page fault per 4 KiB
	// on the data path (16,384 faults, a third of the receiving engine's
	// time, in the first pass over a 64 MiB ring: rc_conn.go).
	pages, err := unix.Mmap(fd, int64(start), int(end-start), unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED|unix.MAP_POPULATE)
	if err != nil {
		return fail(errf(unix.ENOMEM, "mapping %d octets: %v", end-start, err))
	}
	lo := off - start
	return &mapping{fd: fd, pages: pages, mem: pages[lo : lo+length : lo+length]}, nil
}

// Close unmaps and closes (nil-safe, idempotent).
func (m *mapping) Close() {
	if m == nil || m.fd < 0 {
		return
	}
	unix.Munmap(m.pages)
	unix.Close(m.fd)
	m.fd, m.pages, m.mem = -1, nil, nil
}

// checkEventFD accepts only an eventfd as a completion channel: the engine
// writes to it and must know what it is writing to.
func checkEventFD(fd int) error {
	buf := make([]byte, 64)
	n, err := unix.Readlink(fmt.Sprintf("/proc/self/fd/%d", fd), buf)
	if err != nil {
		return errf(unix.EINVAL, "completion channel descriptor: %v", err)
	}
	if string(buf[:n]) != "anon_inode:[eventfd]" {
		return errf(unix.EINVAL, "completion channel descriptor is %q, not an eventfd", buf[:n])
	}
	return nil
}
