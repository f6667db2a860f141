package libfabric

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/iwarpd/iwarpd/test/daemontest"
)

// TestInstallSaysWhatItReplaces (issue 19 item 8): make install's provider
// step (scripts/install-provider.sh) into a private directory (PREFIX) and
// a staging root (DESTDIR): the first install says nothing was there and
// prints the FI_PROVIDER_PATH to use; installing over another build names
// the previous file's build id and version, then the installed one's —
// the version string the provider embeds (git describe).
func TestInstallSaysWhatItReplaces(t *testing.T) {
	needProvider(t)
	if _, err := exec.LookPath("readelf"); err != nil {
		t.Skip("readelf not found (binutils): run scripts/install-build-deps.sh")
	}
	root, err := daemontest.ModuleRoot()
	if err != nil {
		t.Fatal(err)
	}
	script := filepath.Join(root, "scripts", "install-provider.sh")
	so := filepath.Join(provDir, "libiwarpd-fi.so")
	dest := t.TempDir()
	install := func() string {
		t.Helper()
		out, err := exec.Command(script, so, dest, "/opt/iw/lib/libfabric", "private").CombinedOutput()
		if err != nil {
			t.Fatalf("%s: %v\n%s", script, err, out)
		}
		return string(out)
	}
	installed := filepath.Join(dest, "opt", "iw", "lib", "libfabric", "libiwarpd-fi.so")

	out := install()
	for _, w := range []string{"new: no provider was there", "FI_PROVIDER_PATH=/opt/iw/lib/libfabric", "version "} {
		if !strings.Contains(out, w) {
			t.Errorf("first install: no %q in\n%s", w, out)
		}
	}
	if m := regexp.MustCompile(`installed: build id ([0-9a-f]+), version (\S+)`).FindStringSubmatch(out); m == nil || m[2] == "none" {
		t.Errorf("first install: the installed file's build id and version are not printed:\n%s", out)
	}

	// Another build in its place (any other ELF file: its build id).
	other, err := os.ReadFile("/bin/true")
	if err != nil {
		t.Skip(err)
	}
	if err := os.WriteFile(installed, other, 0o644); err != nil {
		t.Fatal(err)
	}
	idOut, _ := exec.Command("readelf", "-n", "/bin/true").Output()
	m := regexp.MustCompile(`Build ID: ([0-9a-f]+)`).FindSubmatch(idOut)
	out = install()
	if !strings.Contains(out, "REPLACING "+installed) {
		t.Errorf("install over another build does not say it replaces it:\n%s", out)
	}
	if m != nil && !strings.Contains(out, "previous: build id "+string(m[1])) {
		t.Errorf("the previous file's build id %s is not printed:\n%s", m[1], out)
	}
	got, err := os.ReadFile(installed)
	want, _ := os.ReadFile(so)
	if err != nil || !bytes.Equal(got, want) {
		t.Fatalf("the installed file is not the build (%v)", err)
	}
	t.Log(out)
}
