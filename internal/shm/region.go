package shm

import (
	"errors"
	"fmt"

	"golang.org/x/sys/unix"
)

// Region is a shared-memory region: a memfd and its mapping in this process.
type Region struct {
	fd  int
	Mem []byte
}

// seals a creator applies: the size can never change again.
const requiredSeals = unix.F_SEAL_SHRINK | unix.F_SEAL_GROW | unix.F_SEAL_SEAL

// ErrNotSealed means a region's descriptor lacks the seals that make mapping
// it safe.
var ErrNotSealed = errors.New("shm: region is not sealed against resizing (create it with shm.Create)")

// Create makes a sealed region of size octets (rounded up to whole pages)
// mapped read-write. name shows up in /proc/PID/fd for diagnostics.
func Create(name string, size int) (*Region, error) {
	if size <= 0 {
		return nil, fmt.Errorf("shm: create %s: size %d", name, size)
	}
	size = (size + unix.Getpagesize() - 1) &^ (unix.Getpagesize() - 1)
	fd, err := unix.MemfdCreate("iwarpd:"+name, unix.MFD_CLOEXEC|unix.MFD_ALLOW_SEALING)
	if err != nil {
		return nil, fmt.Errorf("shm: memfd_create %s: %w", name, err)
	}
	if err := unix.Ftruncate(fd, int64(size)); err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("shm: sizing %s to %d bytes: %w", name, size, err)
	}
	if _, err := unix.FcntlInt(uintptr(fd), unix.F_ADD_SEALS, requiredSeals); err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("shm: sealing %s: %w", name, err)
	}
	mem, err := unix.Mmap(fd, 0, size, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("shm: mapping %s: %w", name, err)
	}
	// The creator allocates the pages now (MADV_POPULATE_WRITE, Linux
	// 5.14; before, a write to each page, all zero), as a verbs
	// registration pins its pages: the memory is the creator's (charged to
	// it), and the peer that maps the region fills its page tables from
	// the pages present instead of faulting on its data path. verbsd
	// refuses a region with a page not allocated and never allocates one
	// itself (verbsd/rnic/holeguard.go; docs/memory-registration.md "Who
	// pays for the pages").
	if unix.Madvise(mem, unix.MADV_POPULATE_WRITE) != nil {
		for off := 0; off < size; off += unix.Getpagesize() {
			mem[off] = 0
		}
	}
	return &Region{fd: fd, Mem: mem}, nil
}

// Map maps a region received from another process. It takes ownership of fd
// (closing it on error too), checks that the region is sealed against
// resizing and at least minSize octets long, and maps all of it with prot.
func Map(fd int, minSize int, prot int) (*Region, error) {
	seals, err := unix.FcntlInt(uintptr(fd), unix.F_GET_SEALS, 0)
	if err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("shm: reading seals: %w (is the descriptor a memfd?)", err)
	}
	if seals&(unix.F_SEAL_SHRINK|unix.F_SEAL_GROW) != unix.F_SEAL_SHRINK|unix.F_SEAL_GROW {
		unix.Close(fd)
		return nil, ErrNotSealed
	}
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("shm: fstat: %w", err)
	}
	if st.Size < int64(minSize) || st.Size <= 0 || st.Size > 1<<40 {
		unix.Close(fd)
		return nil, fmt.Errorf("shm: region of %d bytes, need at least %d: %w", st.Size, minSize, unix.EINVAL)
	}
	mem, err := unix.Mmap(fd, 0, int(st.Size), prot, unix.MAP_SHARED)
	if err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("shm: mapping %d bytes: %w", st.Size, err)
	}
	return &Region{fd: fd, Mem: mem}, nil
}

// FD returns the region's descriptor (to pass to the daemon).
func (r *Region) FD() int { return r.fd }

// Close unmaps the region and closes its descriptor.
func (r *Region) Close() error {
	if r == nil || r.fd < 0 {
		return nil
	}
	err := unix.Munmap(r.Mem)
	if cerr := unix.Close(r.fd); err == nil {
		err = cerr
	}
	r.fd, r.Mem = -1, nil
	return err
}
