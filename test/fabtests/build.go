package fabtests

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
)

// Tarball is the suite's source, relative to the module root.
const Tarball = "../shared/conformance/fabtests-1.17.0.tar.gz"

// Built reports whether the suite is installed in dir (dir/bin holds its
// last program).
func Built(dir string) bool {
	_, err := os.Stat(filepath.Join(dir, "bin", "fi_rdm_tagged_bw"))
	return err == nil
}

// Build compiles the suite from tarball into dir (configure --prefix=dir;
// the sources are unpacked in dir/src), unless it is there already. It needs
// tar, autoconf, automake, libtool (scripts/install-build-deps.sh), a C
// compiler and libfabric-dev. log receives the build's output.
func Build(tarball, dir string, log *os.File) error {
	if Built(dir) {
		return nil
	}
	if _, err := os.Stat(tarball); err != nil {
		return fmt.Errorf("fabtests source: %w (the suite lives in ../shared/conformance beside the checkout)", err)
	}
	for _, tool := range []string{"tar", "autoreconf", "libtoolize", "make", "cc"} {
		if _, err := exec.LookPath(tool); err != nil {
			return fmt.Errorf("building fabtests needs %s: run scripts/install-build-deps.sh as root", tool)
		}
	}
	if _, err := os.Stat("/usr/include/rdma/fabric.h"); err != nil {
		return fmt.Errorf("building fabtests needs libfabric-dev: run scripts/install-build-deps.sh as root")
	}
	dir, err := filepath.Abs(dir)
	if err != nil {
		return err
	}
	src := filepath.Join(dir, "src")
	if err := os.MkdirAll(src, 0o755); err != nil {
		return err
	}
	top := filepath.Join(src, "fabtests-1.17.0")
	steps := [][]string{
		{"tar", "-xzf", tarball, "-C", src},
		{"./autogen.sh"},
		{"./configure", "--prefix=" + dir, "--with-libfabric=/usr"},
		{"make", "-j2"},
		{"make", "install"},
	}
	for i, s := range steps {
		cmd := exec.Command(s[0], s[1:]...)
		if i > 0 {
			cmd.Dir = top
		}
		cmd.Stdout, cmd.Stderr = log, log
		if err := cmd.Run(); err != nil {
			return fmt.Errorf("building fabtests: %v: %w (output above)", s, err)
		}
	}
	if !Built(dir) {
		return fmt.Errorf("building fabtests: %s/bin/fi_rdm_tagged_bw missing after make install", dir)
	}
	return nil
}

// SharedDir returns the directory the suite built from tarball is shared
// in by every checkout of this machine (test/fabtests when the checkout
// has no build/fabtests): os.TempDir()/iwarpd-fabtests-KEY, KEY covering
// the tarball's content, the compiler's version and libfabric's headers
// and library, so that a change of any is a new directory. Building there
// (BuildShared) saves the suite's build, about a minute of a core here,
// in every run of a fresh clone (CI) but the first.
func SharedDir(tarball string) (string, error) {
	h := sha256.New()
	for _, f := range []string{tarball, "/usr/include/rdma/fabric.h"} {
		b, err := os.ReadFile(f)
		if err != nil {
			return "", err
		}
		fmt.Fprintf(h, "%s %d\n", f, len(b))
		h.Write(b)
	}
	if lib, err := filepath.EvalSymlinks("/usr/lib/" + multiarch() + "/libfabric.so.1"); err == nil {
		fi, err := os.Stat(lib)
		if err == nil {
			fmt.Fprintf(h, "%s %d %d\n", lib, fi.Size(), fi.ModTime().UnixNano())
		}
	}
	if out, err := exec.Command("cc", "--version").Output(); err == nil {
		h.Write(out)
	}
	return filepath.Join(os.TempDir(), "iwarpd-fabtests-"+hex.EncodeToString(h.Sum(nil))[:16]), nil
}

// BuildShared builds the suite into dir (SharedDir) unless it is there,
// holding a lock beside it so that two runs at once build it once.
func BuildShared(tarball, dir string, log *os.File) error {
	lock, err := os.OpenFile(dir+".lock", os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return err
	}
	defer lock.Close()
	if err := syscall.Flock(int(lock.Fd()), syscall.LOCK_EX); err != nil {
		return fmt.Errorf("locking %s: %w", lock.Name(), err)
	}
	defer syscall.Flock(int(lock.Fd()), syscall.LOCK_UN)
	if Built(dir) {
		return nil
	}
	os.RemoveAll(dir) // a build that did not finish
	return Build(tarball, dir, log)
}

// multiarch is Debian's multiarch triplet of this machine (where
// libfabric.so.1 lives), or "" when gcc does not say.
func multiarch() string {
	out, err := exec.Command("cc", "-print-multiarch").Output()
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(out))
}
