package libfabric

import (
	"fmt"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/iwarpd/iwarpd/test/daemontest"
)

var (
	sanOnce sync.Once
	sanDir  string // holds a libiwarpd-fi.so built with ASan+UBSan (SAN=1)
	sanEnv  []string
	sanSkip string
	sanErr  string
)

// buildSanitized builds the provider with AddressSanitizer and UBSan
// (c/Makefile SAN=1) and finds the runtimes an uninstrumented fi_pingpong
// must preload to load it.
func buildSanitized() {
	var libs []string
	for _, name := range []string{"libasan.so", "libubsan.so"} {
		out, err := exec.Command("cc", "-print-file-name="+name).Output()
		p := strings.TrimSpace(string(out))
		if err != nil || !filepath.IsAbs(p) {
			sanSkip = "cc does not know " + name + " (install gcc's sanitizer runtimes)"
			return
		}
		if real, err := filepath.EvalSymlinks(p); err == nil {
			p = real
		}
		libs = append(libs, p)
	}
	dir, err := daemontest.SharedC("1", "prov") // beside test/cclient's and CProgram's sanitized core
	if err != nil {
		sanErr = fmt.Sprintf("make -C c SAN=1 prov: %v", err)
		return
	}
	sanDir = dir
	// Later entries win in exec.Cmd.Env: this provider replaces the plain
	// one. exitcode=99 makes any ASan report (leaks included) fail the run;
	// UBSan stops at its first report.
	sanEnv = []string{"FI_PROVIDER_PATH=" + dir, "LD_PRELOAD=" + strings.Join(libs, " "),
		"ASAN_OPTIONS=detect_leaks=1:exitcode=99", "UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1"}
}

// TestPingpongSanitized runs fi_pingpong -c over a provider built with
// AddressSanitizer and UBSan (leak detection on), loopback, two daemons:
// the provider's own code under the real libfabric and its tools, for the
// native RDM and MSG endpoints and for RxM over MSG. A sanitizer report
// makes fi_pingpong exit non-zero, which fails the run.
func TestPingpongSanitized(t *testing.T) {
	needProvider(t)
	sanOnce.Do(buildSanitized)
	if sanErr != "" {
		t.Fatal(sanErr)
	}
	if sanDir == "" {
		t.Skip(sanSkip)
	}
	da := daemon(t, "san-a", daemontest.Options{})
	db := daemon(t, "san-b", daemontest.Options{})
	// The same cases as TestPingpongLoopback (and the same known
	// failures: the native RDM case follows ppCases' mark).
	for _, c := range ppCases() {
		if c.name != "rdm" && c.name != "msg" && c.name != "rxm" {
			continue
		}
		c.env = append(append([]string{}, c.env...), sanEnv...)
		t.Run(c.name, func(t *testing.T) {
			skipKnown(t, c)
			for _, s := range c.sizes {
				pingpong(t, nil, da, db, "127.0.0.1", c, s)
			}
			da.CheckAlive(t)
			db.CheckAlive(t)
		})
	}
}
