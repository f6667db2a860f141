package daemontest

import (
	"os/exec"
	"path/filepath"
	"sync"
	"testing"
)

// CProgram builds c/tests/NAME.c against libiwverbs with ASan and UBSan
// (make -C c SAN=1, as test/cclient builds them) into a directory of the
// test binary's (beside the programs Main built), once per name, and
// returns its path. Without cc, make or
// libjansson-dev the test is skipped; a build failure fails it.
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
	root, err := ModuleRoot()
	if err != nil {
		t.Fatal(err)
	}
	dir := cDir
	if dir == "" {
		base := filepath.Dir(Bins["iwarpd"]) // Main's directory, removed when the tests end
		if Bins["iwarpd"] == "" {
			t.Fatal("daemontest: CProgram needs Main (or Build) to have run")
		}
		dir = filepath.Join(base, "c")
	}
	bin := filepath.Join(dir, "tests", name)
	cmd := exec.Command("make", "-C", filepath.Join(root, "c"), "-s", "BUILD="+dir, "SAN=1", "core", bin)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("make -C c SAN=1 %s: %v\n%s", bin, err, out)
	}
	if cDir == "" {
		cDir = dir
	}
	cBuilt[name] = bin
	return bin
}

var (
	cMu    sync.Mutex
	cBuilt = map[string]string{}
	cDir   string // the first build's directory: later programs reuse its libiwverbs
)
