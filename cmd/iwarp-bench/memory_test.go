package main

import (
	"bytes"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"

	"github.com/iwarpd/iwarpd/verbsd/config"
)

// TestMemoryAboveUserPortLimit runs the memory section as the bench runs
// it (runMemory: bin/iwarp-mem, which starts its own two daemons, on the
// ports planPorts chose) at N above this machine's default per-user port
// limit (docs/iwarpd.md "Limits per user": 376 on 23.5 GiB): the peer
// daemon holds N datagram ports of one user, and the run failed with
// "the daemon's limit of 376 datagram ports per user is reached" at the
// bench's own default -mem-peers (…,1024) before iwarp-mem sized its
// daemons' per-user limits for N.
func TestMemoryAboveUserPortLimit(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the binaries")
	}
	c := config.DefaultConfig()
	c.FitToMachine(config.MemTotal())
	n := c.UserLimits.Ports + 8
	if n > 2048 {
		t.Skipf("this machine's default per-user port limit is %d: a run above it would take too long here", c.UserLimits.Ports)
	}
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	bin := t.TempDir()
	build := exec.Command("go", "build", "-o", bin+"/", "./cmd/iwarpd", "./cmd/iwarp-perf", "./cmd/iwarp-mem")
	build.Dir = root
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	var progress bytes.Buffer
	cfg, err := parseConfig([]string{"-bin", bin, "-mem-peers", strconv.Itoa(n)}, &progress)
	if err != nil {
		t.Fatalf("parseConfig: %v\n%s", err, progress.String())
	}
	if cfg.MemBin == "" {
		t.Fatalf("iwarp-mem not found in %s", bin)
	}
	if err := planPorts(&cfg, &progress); err != nil {
		t.Fatal(err)
	}
	e, failures := runMemory(&cfg, &progress)
	if len(failures) > 0 {
		t.Fatalf("iwarp-mem -n %d (default user-max-ports %d): %v\n%s", n, c.UserLimits.Ports, failures, progress.String())
	}
	for _, s := range e.Series {
		if len(s.Points) != 1 {
			t.Errorf("series %s: %d points, want 1 (N = %d)", s.Name, len(s.Points), n)
		}
	}
	t.Logf("%s", progress.String())
}
