package libfabric

import (
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/iwarpd/iwarpd/test/daemontest"
)

// TestTagMatchingUnit runs the provider's C unit test of tag matching
// (c/prov/tests/test_match.c) under AddressSanitizer and UBSan.
func TestTagMatchingUnit(t *testing.T) {
	needProvider(t)
	cmd := exec.Command(filepath.Join(provDir, "prov", "test_match"))
	cmd.Env = append(daemontest.CleanEnv(), "ASAN_OPTIONS=detect_leaks=1:abort_on_error=0",
		"UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1")
	out, err := run(t, cmd, daemontest.Scaled(120*time.Second))
	if err != nil {
		t.Fatalf("test_match: %v\n%s", err, out)
	}
	if !strings.Contains(out, "test_match: ok") || strings.Contains(out, "Sanitizer") ||
		strings.Contains(out, "runtime error") {
		t.Fatalf("tag matching unit test:\n%s", out)
	}
}
