package rnic

import (
	"bytes"
	"errors"
	"sync"
	"testing"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

func addrOf(b []byte) uint64 { return uint64(uintptr(unsafe.Pointer(&b[0]))) }

// TestCopierAsync: an asynchronous read left on the copier while other
// callers (a locked engine-like goroutine and a free one) read and write
// through it gets its own octets; each access drains it first (one job at
// a time). Non-blocking Collect reports done once it ran; an abandoned
// read is drained by the next access; a read into an unmapped page fails
// with EFAULT.
func TestCopierAsync(t *testing.T) {
	fd := openSelfMem(t)
	c := newCopier(fd, 10*time.Second, func(string) { t.Error("stalled") })
	defer func() { <-c.close() }()
	src := make([]byte, 256<<10)
	for i := range src {
		src[i] = byte(i * 7)
	}
	const rounds = 200
	var wg sync.WaitGroup
	for g := range 2 {
		wg.Add(1)
		go func() { // other callers, as the session's other engines and control goroutine
			defer wg.Done()
			b := make([]byte, 4096)
			for i := range rounds {
				b[0] = byte(i + g)
				dst := make([]byte, len(b))
				if err := c.do(copyRead, dst, addrOf(b), 0); err != nil || !bytes.Equal(dst, b) {
					t.Errorf("caller %d round %d: %v", g, i, err)
					return
				}
			}
		}()
	}
	for i := range rounds {
		dst := make([]byte, len(src)-i)
		a, err := c.start(dst, addrOf(src[i:]))
		if err != nil {
			t.Fatal(err)
		}
		if i%3 == 0 {
			// Polled: done at the latest once it ran (bounded loop).
			var done bool
			for k := 0; k < 1e6 && !done; k++ {
				done, err = a.Collect(false)
				if !done {
					schedYield()
				}
			}
			if !done {
				t.Fatal("a finished read never reported done")
			}
		} else if i%7 == 1 {
			continue // abandoned: the next access drains it
		} else {
			_, err = a.Collect(true)
		}
		if err != nil || !bytes.Equal(dst, src[i:]) {
			t.Fatalf("round %d: %v, octets equal: %v", i, err, bytes.Equal(dst, src[i:]))
		}
	}
	wg.Wait()
	mem, err := unix.Mmap(-1, 0, 2*4096, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Munmap(mem)
	mem[0] = 1
	if _, _, errno := unix.Syscall(unix.SYS_MUNMAP, uintptr(addrOf(mem)+4096), 4096, 0); errno != 0 {
		t.Fatal(errno)
	}
	a, err := c.start(make([]byte, 8192), addrOf(mem))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := a.Collect(true); !errors.Is(err, unix.EFAULT) {
		t.Fatalf("a read running into an unmapped page: %v, want EFAULT", err)
	}
}

// TestCopierAsyncStall: an asynchronous read that outlasts the copier's
// bound (a 64 MiB read under a 1 µs bound: /proc/PID/mem does not wait on
// a userfaultfd, test/hostile's FUSE test has a page that never comes)
// fails with the stall when collected, onStall runs once, and every later
// access and start fails at once; close ends the thread once the copy is
// done.
func TestCopierAsyncStall(t *testing.T) {
	fd := openSelfMem(t)
	var mu sync.Mutex
	stalls := 0
	c := newCopier(fd, time.Microsecond, func(string) { mu.Lock(); stalls++; mu.Unlock() })
	src := make([]byte, 64<<20)
	for i := 0; i < len(src); i += 4096 {
		src[i] = 1 // present
	}
	dst := make([]byte, len(src))
	a, err := c.start(dst, addrOf(src))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := a.Collect(true); !errors.Is(err, errStalled) {
		t.Fatalf("collect: %v, want the stall", err)
	}
	b := make([]byte, 8)
	if err := c.do(copyRead, b, addrOf(b), 0); !errors.Is(err, errStalled) {
		t.Fatalf("an access after the stall: %v, want the stall at once", err)
	}
	if _, err := c.start(b, addrOf(b)); !errors.Is(err, errStalled) {
		t.Fatalf("a start after the stall: %v", err)
	}
	if done, err := a.Collect(false); done && !errors.Is(err, errStalled) {
		t.Fatalf("the stalled read reported %v", err)
	}
	mu.Lock()
	if stalls != 1 {
		t.Errorf("onStall ran %d times, want 1", stalls)
	}
	mu.Unlock()
	select {
	case <-c.close():
	case <-time.After(10 * time.Second):
		t.Fatal("the copier did not end")
	}
}
