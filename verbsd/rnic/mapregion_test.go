package rnic_test

import (
	"fmt"
	"os"
	"strings"
	"testing"
	"unsafe"

	"github.com/iwarpd/iwarpd/verbsd/rnic"
	"golang.org/x/sys/unix"
)

// TestMapRegionPopulated checks that registering memory fills the
// daemon's page tables for the pages the client has (prefaultResident,
// rnic/memory.go), so the data path takes no page fault on them. (A
// region with pages the client never touched is refused: holeguard_test.go.)
// The daemon's share is read as the mapping's Rss in /proc/self/smaps
// (pages this process maps).
func TestMapRegionPopulated(t *testing.T) {
	const size = 256 << 10
	// A sealed memfd made by hand (shm.Create populates all of it).
	fd, err := unix.MemfdCreate("populate", unix.MFD_CLOEXEC|unix.MFD_ALLOW_SEALING)
	if err != nil {
		t.Fatal(err)
	}
	if err := unix.Ftruncate(fd, size); err != nil {
		t.Fatal(err)
	}
	if _, err := unix.FcntlInt(uintptr(fd), unix.F_ADD_SEALS, unix.F_SEAL_SHRINK|unix.F_SEAL_GROW); err != nil {
		t.Fatal(err)
	}
	client, err := unix.Mmap(fd, 0, size, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Munmap(client)
	for i := 0; i < size; i += unix.Getpagesize() {
		client[i] = 1 // the client allocates every page
	}
	m, err := rnic.MapRegion(fd, 0, size)
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	vec := make([]byte, len(m.Pages)/unix.Getpagesize())
	if _, _, errno := unix.Syscall(unix.SYS_MINCORE, uintptr(unsafe.Pointer(&m.Pages[0])), uintptr(len(m.Pages)),
		uintptr(unsafe.Pointer(&vec[0]))); errno != 0 {
		t.Fatalf("mincore: %v", errno)
	}
	for i, v := range vec {
		if v&1 == 0 {
			t.Fatalf("page %d of %d: not resident after mapRegion", i, len(vec))
		}
	}
	rss, err := mappingRss(uintptr(unsafe.Pointer(&m.Pages[0])))
	if err != nil {
		t.Fatal(err)
	}
	if rss != size {
		t.Fatalf("the daemon maps %d octets of the region; want all %d (prefaulted)", rss, size)
	}
}

// mappingRss reads the Rss of the mapping starting at addr from
// /proc/self/smaps.
func mappingRss(addr uintptr) (int, error) {
	b, err := os.ReadFile("/proc/self/smaps")
	if err != nil {
		return 0, err
	}
	prefix := fmt.Sprintf("%x-", addr)
	in := false
	for _, line := range strings.Split(string(b), "\n") {
		if strings.HasPrefix(line, prefix) {
			in = true
			continue
		}
		if in && strings.HasPrefix(line, "Rss:") {
			var kb int
			if _, err := fmt.Sscanf(strings.TrimPrefix(line, "Rss:"), "%d", &kb); err != nil {
				return 0, err
			}
			return kb << 10, nil
		}
	}
	return 0, fmt.Errorf("no mapping at %#x in /proc/self/smaps", addr)
}
