package captures

import (
	"os"
	"path/filepath"
	"testing"
)

// TestDirWalksUp finds shared/captures two directories above the working
// directory.
func TestDirWalksUp(t *testing.T) {
	root := t.TempDir()
	want := filepath.Join(root, "shared", "captures")
	deep := filepath.Join(root, "checkout", "pkg")
	for _, d := range []string{want, deep} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	t.Chdir(deep)
	if got := Dir(t); got != want {
		t.Fatalf("Dir = %q, want %q", got, want)
	}
}

// TestDirSkipsSayingWhy skips a test run where no shared/captures is
// above the working directory, naming the directory and what to do.
func TestDirSkipsSayingWhy(t *testing.T) {
	tmp := t.TempDir()
	for d := tmp; d != filepath.Dir(d); d = filepath.Dir(d) {
		if _, err := os.Stat(filepath.Join(filepath.Dir(d), "shared", "captures")); err == nil {
			t.Skipf("%s has shared/captures above it on this machine", tmp)
		}
	}
	var sub *testing.T
	t.Run("plain clone", func(st *testing.T) {
		sub = st
		st.Chdir(tmp)
		Dir(st)
		st.Error("Dir returned without captures")
	})
	if !sub.Skipped() {
		t.Fatal("the test without captures was not skipped")
	}
}

// TestFileSkipsWithoutTheCapture skips when the directory lacks the file.
func TestFileSkipsWithoutTheCapture(t *testing.T) {
	root := t.TempDir()
	if err := os.MkdirAll(filepath.Join(root, "shared", "captures"), 0o755); err != nil {
		t.Fatal(err)
	}
	var sub *testing.T
	t.Run("missing capture", func(st *testing.T) {
		sub = st
		st.Chdir(root)
		File(st, "absent.pcap")
		st.Error("File returned a capture that does not exist")
	})
	if !sub.Skipped() {
		t.Fatal("not skipped")
	}
}
