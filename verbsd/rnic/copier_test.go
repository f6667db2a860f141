package rnic

import (
	"bytes"
	"errors"
	"fmt"
	"runtime"
	"sync"
	"testing"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

func openSelfMem(t *testing.T) int {
	t.Helper()
	fd, err := unix.Open("/proc/self/mem", unix.O_RDWR|unix.O_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	return fd
}

// TestCopierConcurrent: callers on locked and free goroutines, reading and
// writing their own buffers through one copier at once (serialized by it),
// each see their own octets every time; some accesses come after the
// copier went to sleep (a pause longer than its spin). Close then ends the
// thread and closes the descriptor.
func TestCopierConcurrent(t *testing.T) {
	fd := openSelfMem(t)
	c := newCopier(fd, 10*time.Second, func(string) { t.Error("stalled") })
	const callers, rounds = 4, 300
	var wg sync.WaitGroup
	for g := range callers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if g%2 == 0 {
				runtime.LockOSThread() // as an engine
				defer runtime.UnlockOSThread()
			}
			src := make([]byte, 1000+g*4096)
			dst := make([]byte, len(src))
			for i := range rounds {
				for k := range src {
					src[k] = byte(i + k + g)
				}
				if err := c.do(copyRead, dst, uint64(uintptr(unsafe.Pointer(&src[0]))), 0); err != nil {
					t.Error(err)
					return
				}
				if !bytes.Equal(dst, src) {
					t.Errorf("caller %d round %d: read other octets", g, i)
					return
				}
				want := fmt.Appendf(nil, "caller %d round %d", g, i)
				if err := c.do(copyWrite, want, uint64(uintptr(unsafe.Pointer(&dst[0]))), 0); err != nil {
					t.Error(err)
					return
				}
				if !bytes.Equal(dst[:len(want)], want) {
					t.Errorf("caller %d round %d: wrote %q", g, i, dst[:len(want)])
					return
				}
				if i%50 == 0 {
					time.Sleep(4 * copierSpin) // the copier goes to sleep
				}
			}
		}()
	}
	wg.Wait()
	select {
	case <-c.close():
	case <-time.After(10 * time.Second):
		t.Fatal("the copier did not end after close")
	}
	if _, err := unix.FcntlInt(uintptr(fd), unix.F_GETFD, 0); !errors.Is(err, unix.EBADF) {
		t.Fatalf("descriptor still open after the copier ended: %v", err)
	}
}

// TestCopierCloseUnstarted: a copier never used starts no thread; close
// closes its descriptor at once, and an access after it fails.
func TestCopierCloseUnstarted(t *testing.T) {
	fd := openSelfMem(t)
	c := newCopier(fd, time.Second, nil)
	<-c.close()
	<-c.close() // idempotent
	if _, err := unix.FcntlInt(uintptr(fd), unix.F_GETFD, 0); !errors.Is(err, unix.EBADF) {
		t.Fatalf("descriptor still open: %v", err)
	}
	b := make([]byte, 8)
	if err := c.do(copyRead, b, uint64(uintptr(unsafe.Pointer(&b[0]))), 0); !errors.Is(err, unix.EBADF) {
		t.Fatalf("access after close: %v, want EBADF", err)
	}
}
