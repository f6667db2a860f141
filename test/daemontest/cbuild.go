package daemontest

import (
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"
)

// CProgram builds c/tests/NAME.c against libiwverbs with ASan and UBSan
// (make -C c SAN=1, as test/cclient builds them) into the checkout's
// shared sanitized build (SharedC), once per name and test binary, and
// returns its path. Without cc, make or libjansson-dev the test is
// skipped; a build failure fails it.
func CProgram(t testing.TB, name string) string {
	t.Helper()
	for _, tool := range []string{"cc", "make", "pkg-config"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("%s not found; run scripts/install-build-deps.sh", tool)
		}
	}
	if err := exec.Command("pkg-config", "--exists", "jansson").Run(); err != nil {
		t.Skip("libjansson-dev not installed; run scripts/install-build-deps.sh")
	}
	cMu.Lock()
	defer cMu.Unlock()
	if p, ok := cBuilt[name]; ok {
		return p
	}
	dir, err := SharedC("1", "core", "tests")
	if err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(dir, "tests", name)
	if _, err := os.Stat(bin); err != nil {
		t.Fatalf("daemontest: %s not built by make -C c SAN=1 tests: %v", name, err)
	}
	cBuilt[name] = bin
	return bin
}

var (
	cMu    sync.Mutex
	cBuilt = map[string]string{}
)
