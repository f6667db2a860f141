package libfabric

import (
	"context"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/iwarpd/iwarpd/test/daemontest"
)

// TestCancel runs c/prov/tests/fi_cancel.c (built here with ASan and
// UBSan) against a real daemon: fi_cancel of posted tagged and untagged
// RDM receives gives one FI_ECANCELED error completion each with its
// context and flags, a repeat or an unknown context -FI_ENOENT, and later
// messages reach only the receives still posted.
func TestCancel(t *testing.T) {
	needProvider(t)
	root, err := daemontest.ModuleRoot()
	if err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(t.TempDir(), "fi_cancel")
	out, err := exec.Command("cc", "-std=gnu11", "-O1", "-g", "-Wall", "-Wextra", "-Werror",
		"-fsanitize=address,undefined", "-fno-sanitize-recover=all", "-o", bin,
		filepath.Join(root, "c", "prov", "tests", "fi_cancel.c"), "-lfabric").CombinedOutput()
	if err != nil {
		t.Fatalf("cc fi_cancel.c: %v\n%s", err, out)
	}
	d := daemon(t, "cancel", daemontest.Options{})
	ctx, cancel := context.WithTimeout(context.Background(), daemontest.Scaled(60*time.Second))
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, "iwarpd")
	// Leaks of libfabric itself are not ours to judge here.
	cmd.Env = fiEnv(d, append([]string{"ASAN_OPTIONS=detect_leaks=0"}, native...)...)
	out, err = cmd.CombinedOutput()
	if err != nil || !strings.Contains(string(out), "fi_cancel: ok") {
		t.Fatalf("fi_cancel: %v\n%s", err, out)
	}
	t.Log(strings.TrimSpace(string(out)))
	d.CheckAlive(t)
}
