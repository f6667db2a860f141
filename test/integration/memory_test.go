package integration

import (
	"bytes"
	"context"
	"encoding/json"
	"os/exec"
	"testing"
	"time"
)

// TestMemoryPerPeer runs cmd/iwarp-mem with 100 peers as a smoke test: it
// must run, exchange a message with every peer (RD and RC: all of them; UD
// on loopback: nearly all) and print figures. No threshold is asserted on
// memory (too noisy at 100 peers); docs/memory.md has the N=1000 figures.
func TestMemoryPerPeer(t *testing.T) {
	if testing.Short() {
		t.Skip("skipping the memory experiment in -short mode")
	}
	root, err := moduleRoot()
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	build := exec.Command("go", "build", "-o", dir+"/", "./cmd/iwarp-mem")
	build.Dir = root
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build ./cmd/iwarp-mem: %v\n%s", err, out)
	}
	ctx, cancel := context.WithTimeout(context.Background(), scaled(120*time.Second))
	defer cancel()
	const n = 100
	var stdout, stderr bytes.Buffer
	// Ports 30400-30731 (the hub takes the 100 below -port-base, the peers
	// 2N+32 from it): below the kernel's ephemeral range (32768-60999), so
	// no socket of a test running in parallel is handed one of them.
	cmd := exec.CommandContext(ctx, dir+"/iwarp-mem", "-n", "100", "-iwarpd", bins.iwarpd, "-port-base", "30500", "-settle", "300ms", "-json")
	cmd.Env = cleanEnv()
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("iwarp-mem: %v\n%s%s", err, stdout.Bytes(), stderr.Bytes())
	}
	var rs []struct {
		Type      string `json:"type"`
		Peers     int    `json:"peers"`
		Replies   int    `json:"replies"`
		DaemonRSS int64  `json:"daemon_rss_per_peer"`
		DaemonPSS int64  `json:"daemon_pss_per_peer"`
		ClientRSS int64  `json:"client_rss_per_peer"`
		ClientPSS int64  `json:"client_pss_per_peer"`
		Kernel    int64  `json:"kernel_per_peer"`
		Total     int64  `json:"total_per_peer"`
	}
	if err := json.Unmarshal(stdout.Bytes(), &rs); err != nil {
		t.Fatalf("iwarp-mem -json: %v\n%s", err, stdout.Bytes())
	}
	seen := map[string]bool{}
	for _, r := range rs {
		seen[r.Type] = true
		t.Logf("%s: %d peers, %d replies; per peer: daemon RSS %d Pss %d, client RSS %d Pss %d, kernel %d, total %d",
			r.Type, r.Peers, r.Replies, r.DaemonRSS, r.DaemonPSS, r.ClientRSS, r.ClientPSS, r.Kernel, r.Total)
		if r.Peers != n {
			t.Errorf("%s: %d peers, want %d", r.Type, r.Peers, n)
		}
		if min := map[string]int{"ud": n * 9 / 10, "rd": n, "rc": n}[r.Type]; r.Replies < min || r.Replies > n {
			t.Errorf("%s: %d replies, want %d..%d", r.Type, r.Replies, min, n)
		}
	}
	for _, typ := range []string{"ud", "rd", "rc"} {
		if !seen[typ] {
			t.Errorf("no %s result in\n%s", typ, stdout.Bytes())
		}
	}
}
