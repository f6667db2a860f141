//go:build linux

package siwvm

import (
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"sync"
	"testing"
)

// soakSizes are the rping sizes of a soak run: the smallest, the default
// interop ones, and up to the largest both rpings accept (64 KiB - 1).
var soakSizes = []int{64, 4096, 16384, 60000, 65535}

// TestIwarpdSiwSoak is the soak mode of the interop suite (make
// interop-soak): with IWARPD_SIW_SOAK=N it runs every configuration of
// TestIwarpdSiwInterop (MPA rev 1 and 2, CRC on and off, peer-to-peer, both
// roles) N times with rping sizes 64 B to 64 KiB, while
// IWARPD_SIW_SOAK_LOAD busy processes (default 2, one per core here) load
// the host. Failures keep their guest capture under IWARPD_SIW_VM_KEEP, and
// the last line counts failures per configuration. Without
// IWARPD_SIW_SOAK it skips.
func TestIwarpdSiwSoak(t *testing.T) {
	n, err := strconv.Atoi(os.Getenv("IWARPD_SIW_SOAK"))
	if err != nil || n <= 0 {
		t.Skip("soak mode: set IWARPD_SIW_SOAK=N (make interop-soak SOAK=N)")
	}
	g, err := Available()
	if err != nil {
		t.Skip(err)
	}
	load := 2
	if v, err := strconv.Atoi(os.Getenv("IWARPD_SIW_SOAK_LOAD")); err == nil && v >= 0 {
		load = v
	}
	stopLoad := startCPULoad(t, load)
	defer stopLoad()
	bins := buildInteropBinaries(t)
	modes := []interopMode{
		{name: "rev2-crc", rev: 2, crc: true, sizes: soakSizes},
		{name: "rev2-nocrc", rev: 2, sizes: soakSizes},
		{name: "rev1-crc", rev: 1, crc: true, sizes: soakSizes},
		{name: "rev1-nocrc", rev: 1, sizes: soakSizes},
		{name: "rev2-p2p", rev: 2, p2p: true, sizes: soakSizes},
	}
	var mu sync.Mutex
	failed := map[string]int{}
	slot := 0
	t.Run("soak", func(t *testing.T) {
		for i := range n {
			for _, m := range modes {
				for _, role := range []string{"siw-client", "siw-server"} {
					m, role, s, name := m, role, slot%10, fmt.Sprintf("%s/%s", m.name, role)
					slot++
					t.Run(fmt.Sprintf("%d/%s", i, name), func(t *testing.T) {
						t.Parallel() // at most GOMAXPROCS guests at once
						defer func() {
							if t.Failed() {
								mu.Lock()
								failed[name]++
								mu.Unlock()
							}
						}()
						if role == "siw-client" {
							testIwarpdResponder(t, g, bins, m, s)
						} else {
							testIwarpdInitiator(t, g, bins, m, s)
						}
					})
				}
			}
		}
	})
	for _, m := range modes {
		for _, role := range []string{"siw-client", "siw-server"} {
			name := m.name + "/" + role
			t.Logf("soak: %-22s %d of %d runs failed", name, failed[name], n)
		}
	}
}

// startCPULoad starts k busy-looping shell processes beside the test and
// returns what stops them (also run at cleanup).
func startCPULoad(t *testing.T, k int) func() {
	t.Helper()
	var procs []*exec.Cmd
	for range k {
		c := exec.Command("/bin/sh", "-c", "while :; do :; done")
		if err := c.Start(); err != nil {
			t.Fatalf("CPU load: %v", err)
		}
		procs = append(procs, c)
	}
	var once sync.Once
	stop := func() {
		once.Do(func() {
			for _, c := range procs {
				_ = c.Process.Kill()
				_ = c.Wait()
			}
		})
	}
	t.Cleanup(stop)
	return stop
}
