package daemontest

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"testing"
)

// Programs are the packages Build always compiles: the daemon and the two
// tools end-to-end suites run against it.
var Programs = []string{"./cmd/iwarpd", "./cmd/iwarpctl", "./cmd/iwarp-perf"}

// Bins are the programs Build compiled, by name ("iwarpd", "iwarpctl",
// "iwarp-perf", and the base name of each extra package).
var Bins = map[string]string{}

// Build compiles Programs and the extra packages (paths relative to the
// module root, such as "./examples/rping") of the module above the working
// directory into dir, in one go build, and records them in Bins.
func Build(dir string, extra ...string) error {
	root, err := ModuleRoot()
	if err != nil {
		return err
	}
	pkgs := append(append([]string(nil), Programs...), extra...)
	cmd := exec.Command("go", append([]string{"build", "-o", dir + string(filepath.Separator)}, pkgs...)...)
	cmd.Dir = root
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("daemontest: go build %v: %v\n%s", pkgs, err, out)
	}
	for _, p := range pkgs {
		Bins[path.Base(p)] = filepath.Join(dir, path.Base(p))
	}
	return nil
}

// Main is the body of a TestMain whose tests start daemons: it builds the
// programs once per test binary (Build, with the extra packages) into a new
// temporary directory, calls setup with that directory when setup is not nil
// (a suite's own C or MPI builds go beside them), runs the tests, removes
// the directory and returns the exit code for os.Exit. A build that fails
// fails the test binary with the compiler's output.
func Main(m *testing.M, setup func(dir string), extra ...string) int {
	dir, err := os.MkdirTemp("", "iwarpd-test-")
	if err != nil {
		fmt.Fprintln(os.Stderr, "daemontest: a directory for the programs:", err)
		return 1
	}
	defer os.RemoveAll(dir)
	if err := Build(dir, extra...); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	if setup != nil {
		setup(dir)
	}
	return m.Run()
}

// ModuleRoot walks up from the working directory to go.mod.
func ModuleRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", errors.New("daemontest: go.mod not found above the test directory")
		}
		dir = parent
	}
}
