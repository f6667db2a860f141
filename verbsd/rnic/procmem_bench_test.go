package rnic

import (
	"fmt"
	"os"
	"runtime"
	"testing"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// BenchmarkProcMemCost: what reaching process memory costs per access, in
// the same run, on this process's own memory: process_vm_readv(2) (the
// mechanism before issue 18), pread(2) of /proc/self/mem on the calling
// thread, and pread through the session copier (rnic/copier.go: the
// hand-off to the copier thread and the caller's spin or wait, as an
// engine pays it) from a free goroutine and from one locked to its thread
// (as an engine is); "cold" is the locked caller after a pause longer than
// the copier's spin (the copier asleep: a futex wake-up), on at most 200
// accesses. Metrics: ns per access of each, and each against pread.
// docs/memory-registration.md has the figures:
//
//	flock /tmp/iwarpd-test.lock go test -run '^$' -bench ProcMemCost -benchtime 2000x ./verbsd/rnic/
func BenchmarkProcMemCost(b *testing.B) {
	for _, n := range []int{64, 64 << 10, 1 << 20} {
		b.Run(sizeName(n), func(b *testing.B) {
			src := make([]byte, n)
			dst := make([]byte, n)
			for i := range src {
				src[i] = byte(i)
			}
			addr := uint64(uintptr(unsafe.Pointer(&src[0])))
			fd, err := unix.Open("/proc/self/mem", unix.O_RDWR|unix.O_CLOEXEC, 0)
			if err != nil {
				b.Fatal(err)
			}
			c := newCopier(fd, time.Second, nil) // owns fd
			defer c.close()
			pid := os.Getpid()
			local := []unix.Iovec{{Base: &dst[0]}}
			local[0].SetLen(n)
			remote := []unix.RemoteIovec{{Base: uintptr(addr), Len: n}}
			// An engine's thread is locked (rnic/engine.go run): time the
			// copier from a locked goroutine too, warm (back to back) and
			// cold (the copier asleep).
			var lk, cold time.Duration
			colds := min(b.N, 200)
			locked := make(chan struct{})
			go func() {
				defer close(locked)
				runtime.LockOSThread()
				defer runtime.UnlockOSThread()
				for range b.N {
					t0 := time.Now()
					if err := c.do(copyRead, dst, addr, 0); err != nil {
						b.Error(err)
						return
					}
					lk += time.Since(t0)
				}
				for range colds {
					time.Sleep(4 * copierSpin)
					t0 := time.Now()
					if err := c.do(copyRead, dst, addr, 0); err != nil {
						b.Error(err)
						return
					}
					cold += time.Since(t0)
				}
			}()
			<-locked
			var pvm, pr, cp time.Duration
			b.ResetTimer()
			for range b.N {
				t0 := time.Now()
				if k, err := unix.ProcessVMReadv(pid, local, remote, 0); err != nil || k != n {
					b.Fatalf("process_vm_readv: %d, %v", k, err)
				}
				t1 := time.Now()
				if err := preadMem(fd, dst, addr); err != nil {
					b.Fatal(err)
				}
				t2 := time.Now()
				if err := c.do(copyRead, dst, addr, 0); err != nil {
					b.Fatal(err)
				}
				t3 := time.Now()
				pvm, pr, cp = pvm+t1.Sub(t0), pr+t2.Sub(t1), cp+t3.Sub(t2)
			}
			b.StopTimer()
			if dst[n-1] != src[n-1] {
				b.Fatal("read the wrong octets")
			}
			per := func(d time.Duration, k int) float64 { return float64(d.Nanoseconds()) / float64(k) }
			b.ReportMetric(per(pvm, b.N), "pvm-ns")
			b.ReportMetric(per(pr, b.N), "pread-ns")
			b.ReportMetric(per(cp, b.N), "copier-ns")
			b.ReportMetric(per(lk, b.N), "locked-ns")
			b.ReportMetric(per(cold, colds), "cold-ns")
			b.ReportMetric(per(pvm, b.N)/per(pr, b.N), "pvm/pread")
			b.ReportMetric(per(cp, b.N)/per(pr, b.N), "copier/pread")
			b.ReportMetric(per(lk, b.N)/per(pr, b.N), "locked/pread")
			b.ReportMetric(per(cold, colds)/per(pr, b.N), "cold/pread")
		})
	}
}

func sizeName(n int) string {
	switch {
	case n >= 1<<20:
		return fmt.Sprintf("%dMiB", n>>20)
	case n >= 1<<10:
		return fmt.Sprintf("%dKiB", n>>10)
	}
	return fmt.Sprintf("%dB", n)
}
