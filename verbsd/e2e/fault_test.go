package e2e

import (
	"errors"
	"testing"

	"github.com/iwarpd/iwarpd/verbsd/rnic"
	"golang.org/x/sys/unix"
)

// TestFaultContained: a SIGBUS on client memory (a mapping past the end of
// a memfd shrunk under it: what a hugetlb hole or an unsealed memfd would
// do, rnic/memory.go refuses both) in a goroutine guarded as the engine and the
// sessions are (rnic/fault.go) fails that piece of work with EFAULT instead of
// killing the process.
func TestFaultContained(t *testing.T) {
	fd, err := unix.MemfdCreate("fault", unix.MFD_CLOEXEC)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(fd)
	page := unix.Getpagesize()
	if err := unix.Ftruncate(fd, int64(2*page)); err != nil {
		t.Fatal(err)
	}
	mem, err := unix.Mmap(fd, 0, 2*page, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Munmap(mem)
	if err := unix.Ftruncate(fd, 0); err != nil { // the pages vanish: an access is SIGBUS
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() {
		rnic.GuardClientMemory()
		done <- rnic.GuardedCommand(func() error {
			mem[page] = 1 // SIGBUS
			return nil
		})
	}()
	err = <-done
	if !errors.Is(err, unix.EFAULT) {
		t.Fatalf("guarded write to vanished memory: %v, want EFAULT", err)
	}
	// A panic that is not a memory fault is not swallowed.
	func() {
		defer func() {
			if r := recover(); r == nil {
				t.Error("a plain panic was swallowed")
			}
		}()
		rnic.GuardedCommand(func() error { panic("bug") })
	}()
}
