package captures

import (
	"os"
	"path/filepath"
	"testing"
)

// Dir returns the shared/captures directory found by walking up from the
// test's working directory (the checkout's parent holds shared/ on a
// developer machine and in CI), or skips t naming the directory it started
// from and how to get the captures.
func Dir(t testing.TB) string {
	t.Helper()
	wd, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	for dir := wd; ; dir = filepath.Dir(dir) {
		c := filepath.Join(dir, "shared", "captures")
		if fi, err := os.Stat(c); err == nil && fi.IsDir() {
			return c
		}
		if filepath.Dir(dir) == dir {
			break
		}
	}
	t.Skipf("%s needs the reference captures: no shared/captures in %s or any directory above it; "+
		"put the project's shared/ directory (or a link to it) beside the checkout, as CI does, to run it", t.Name(), wd)
	return ""
}

// File returns the path of capture name in Dir, or skips t as Dir does, or
// when that capture is missing.
func File(t testing.TB, name string) string {
	t.Helper()
	p := filepath.Join(Dir(t), name)
	if _, err := os.Stat(p); err != nil {
		t.Skipf("%s needs the capture %s: %v; update the project's shared/ directory beside the checkout", t.Name(), name, err)
	}
	return p
}
