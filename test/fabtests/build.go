package fabtests

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
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
