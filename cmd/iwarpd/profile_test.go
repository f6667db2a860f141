package main

import (
	"bytes"
	"compress/gzip"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/iwarpd/iwarpd/test/daemontest"
)

// TestCPUProfile: -cpuprofile FILE writes a pprof profile (gzipped
// protocol buffer) when the daemon stops on SIGTERM. Ports 34480-34499.
func TestCPUProfile(t *testing.T) {
	bin := daemontest.Bins["iwarpd"]
	dir := t.TempDir()
	prof := filepath.Join(dir, "cpu.pprof")
	d := daemontest.Start(t, "iwarpd", daemontest.Options{Sock: filepath.Join(dir, "iwarpd.sock"),
		Ports: "34480-34489", Extra: []string{"-rd-ports", "34490-34499", "-cpuprofile", prof}})
	d.Signal(t, syscall.SIGTERM)
	if err := d.Wait(t); err != nil {
		t.Fatalf("daemon exit after SIGTERM: %v\n%s", err, d.Stderr)
	}
	b, err := os.ReadFile(prof)
	if err != nil {
		t.Fatal(err)
	}
	zr, err := gzip.NewReader(bytes.NewReader(b))
	if err != nil {
		t.Fatalf("the profile is not gzipped (pprof's format): %v", err)
	}
	if body, err := io.ReadAll(zr); err != nil || len(body) == 0 {
		t.Errorf("profile body: %d octets, %v", len(body), err)
	}

	// A profile that cannot be created stops the daemon at start, naming the flag.
	out, err := exec.Command(bin, "-socket", filepath.Join(dir, "b.sock"), "-ud-ports", "34480-34489", "-rd-ports", "34490-34499",
		"-cpuprofile", filepath.Join(dir, "no", "such", "dir", "cpu.pprof")).CombinedOutput()
	if err == nil || !strings.Contains(string(out), "-cpuprofile") {
		t.Errorf("unwritable -cpuprofile: %v, %s", err, out)
	}
}
