package rnic_test

import (
	"errors"
	"strings"
	"testing"
	"unsafe"

	"github.com/iwarpd/iwarpd/verbsd/rnic"
	"golang.org/x/sys/unix"
)

// clientMemfd makes a sealed memfd of size octets as a client would, maps
// it, and writes every page except those in [holeLo, holeHi).
func clientMemfd(t *testing.T, size, holeLo, holeHi int) (int, []byte) {
	t.Helper()
	fd, err := unix.MemfdCreate("holes", unix.MFD_CLOEXEC|unix.MFD_ALLOW_SEALING)
	if err != nil {
		t.Fatal(err)
	}
	if err := unix.Ftruncate(fd, int64(size)); err != nil {
		t.Fatal(err)
	}
	if _, err := unix.FcntlInt(uintptr(fd), unix.F_ADD_SEALS, unix.F_SEAL_SHRINK|unix.F_SEAL_GROW); err != nil {
		t.Fatal(err)
	}
	client, err := unix.Mmap(fd, 0, size, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { unix.Munmap(client) })
	for i := 0; i < size; i += unix.Getpagesize() {
		if i < holeLo || i >= holeHi {
			client[i] = 1
		}
	}
	return fd, client
}

// TestMapRegionRefusesHoles: a region with a page the client never wrote
// is refused with EFAULT naming the octets (issue 18, defect 3: the daemon
// would allocate it, charged to itself); a hole outside the range asked
// for does not matter.
func TestMapRegionRefusesHoles(t *testing.T) {
	const size, lo, hi = 1 << 20, 400 << 10, 404 << 10
	fd, _ := clientMemfd(t, size, lo, hi)
	dup := func() int {
		d, err := unix.Dup(fd)
		if err != nil {
			t.Fatal(err)
		}
		return d
	}
	_, err := rnic.MapRegion(dup(), 4096, size-8192)
	if !errors.Is(err, unix.EFAULT) || !strings.Contains(err.Error(), "[409600, 413696) are not allocated") {
		t.Fatalf("MapRegion of a range with a hole: %v; want EFAULT naming [409600, 413696)", err)
	}
	m, err := rnic.MapRegion(dup(), 0, lo)
	if err != nil {
		t.Fatalf("MapRegion of the allocated part before the hole: %v", err)
	}
	m.Close()
	m, err = rnic.MapRegion(fd, hi, size-hi)
	if err != nil {
		t.Fatalf("MapRegion of the allocated part after the hole: %v", err)
	}
	m.Close()
}

// TestMapRegionGuardsHoles: pages the client punches out after
// registration (fallocate PUNCH_HOLE, what MADV_REMOVE does) are never
// allocated by the daemon's accesses: its own loads and stores fault
// (contained: EFAULT for the guarded work), the kernel's copies into and
// out of the mapping (read(2), write(2): readv, recvmmsg and sendmmsg
// alike) fail with EFAULT, the holes stay holes and the daemon's mapping
// holds no more than the client's pages. Pages still present work.
func TestMapRegionGuardsHoles(t *testing.T) {
	if how, err := rnic.HoleGuard(); err != nil {
		t.Skipf("no hole guard on this machine (%v): the daemon refuses holes at registration only", err)
	} else {
		t.Logf("hole guard: %s", how)
	}
	const size, punched = 1 << 20, 256 << 10
	fd, client := clientMemfd(t, size, 0, 0)
	keep, err := unix.Dup(fd)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(keep)
	m, err := rnic.MapRegion(fd, 0, size)
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	if err := unix.Fallocate(keep, unix.FALLOC_FL_PUNCH_HOLE|unix.FALLOC_FL_KEEP_SIZE, punched, size-punched); err != nil {
		t.Fatal(err)
	}
	guarded := func(f func()) error {
		done := make(chan error, 1)
		go func() {
			rnic.GuardClientMemory()
			done <- rnic.GuardedCommand(func() error { f(); return nil })
		}()
		return <-done
	}
	if err := guarded(func() { m.Mem[512<<10] = 7 }); !errors.Is(err, unix.EFAULT) {
		t.Errorf("a store into a punched page: %v, want a contained fault (EFAULT)", err)
	}
	var sink byte
	if err := guarded(func() { sink += m.Mem[300<<10] }); !errors.Is(err, unix.EFAULT) {
		t.Errorf("a load from a punched page: %v, want a contained fault (EFAULT)", err)
	}
	var p [2]int
	if err := unix.Pipe2(p[:], unix.O_CLOEXEC|unix.O_NONBLOCK); err != nil {
		t.Fatal(err)
	}
	defer unix.Close(p[0])
	defer unix.Close(p[1])
	unix.Write(p[1], make([]byte, 4096))
	if n, err := unix.Read(p[0], m.Mem[600<<10:600<<10+4096]); err != unix.EFAULT {
		t.Errorf("read(2) into a punched page: %d, %v; want EFAULT", n, err)
	}
	unix.Read(p[0], make([]byte, 4096))
	if n, err := unix.Write(p[1], m.Mem[700<<10:700<<10+4096]); err != unix.EFAULT {
		t.Errorf("write(2) from a punched page: %d, %v; want EFAULT", n, err)
	}
	if err := guarded(func() { m.Mem[100] = 42 }); err != nil || client[100] != 42 {
		t.Errorf("a store into a present page: %v, client sees %d", err, client[100])
	}
	if hole, err := unix.Seek(keep, 0, unix.SEEK_HOLE); err != nil || hole != punched {
		t.Errorf("first hole at %d (%v) after the daemon's accesses; want %d: the daemon allocated a page", hole, err, punched)
	}
	rss, err := mappingRss(uintptr(unsafe.Pointer(&m.Pages[0])))
	if err != nil {
		t.Fatal(err)
	}
	if rss > punched {
		t.Errorf("the daemon's mapping holds %d octets; at most the %d the client kept", rss, punched)
	}
}
