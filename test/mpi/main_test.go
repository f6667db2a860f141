package mpi

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/iwarpd/iwarpd/test/daemontest"
	"github.com/iwarpd/iwarpd/test/mpi/mpilaunch"
)

// Port blocks of this package (doc.go).
var (
	udBlocks = daemontest.Blocks{Base: 28200, Size: 25, Count: 4}
	rdBlocks = daemontest.Blocks{Base: 28300, Size: 25, Count: 4}
)

var (
	binDir   string // the test's temporary directory
	progDir  string // the MPI programs, built by mpicc ("" when they could not be: mpiSkip/mpiErr say why)
	provDir  string // holds libiwarpd-fi.so ("" when it could not be built: provSkip/provErr say why)
	nsrsh    string // nsrsh.sh
	mpiSkip  string
	mpiErr   string
	provSkip string
	provErr  string
)

// progs are the test programs in progs/ (check.h is their shared header).
var progs = []string{"wildunexp", "p2p", "anysrc", "trunc", "unexpected", "coll", "rma", "intercomm", "passive"}

// rxmProgs are built too but run only by TestMPIRxM (rxm_test.go).
var rxmProgs = []string{"bigmsg"}

func TestMain(m *testing.M) {
	os.Exit(daemontest.Main(m, func(dir string) {
		binDir = dir
		buildProvider()
		buildProgs(filepath.Join(dir, "progs"))
	}))
}

// ports returns the next private UD and RD port blocks, "first-last".
func ports() (ud, rd string) { return udBlocks.Next(), rdBlocks.Next() }

// buildProvider builds libiwarpd-fi.so (make -C c prov, as c/prov's
// Makefile) into the checkout's shared C build (daemontest.SharedC).
func buildProvider() {
	for _, tool := range []string{"cc", "make", "pkg-config"} {
		if _, err := exec.LookPath(tool); err != nil {
			provSkip = tool + " not found: run scripts/install-build-deps.sh"
			return
		}
	}
	if _, err := os.Stat("/usr/include/rdma/providers/fi_prov.h"); err != nil {
		provSkip = "libfabric-dev is not installed: run scripts/install-build-deps.sh"
		return
	}
	dir, err := daemontest.SharedC("", "prov")
	if err != nil {
		provErr = fmt.Sprintf("make -C c prov: %v", err)
		return
	}
	provDir = dir
}

// buildProgs compiles every program of progs/ with mpicc into dir.
func buildProgs(dir string) {
	if why := mpilaunch.Available(); why != "" {
		mpiSkip = why
		return
	}
	root, err := daemontest.ModuleRoot()
	if err != nil {
		mpiErr = err.Error()
		return
	}
	nsrsh = filepath.Join(root, "test", "mpi", "nsrsh.sh")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		mpiErr = err.Error()
		return
	}
	src := filepath.Join(root, "test", "mpi", "progs")
	var errs []string
	for _, p := range append(append([]string{}, progs...), rxmProgs...) {
		out, err := exec.Command("mpicc", "-std=gnu11", "-O2", "-g", "-Wall", "-Wextra", "-Werror",
			"-o", filepath.Join(dir, p), filepath.Join(src, p+".c")).CombinedOutput()
		if err != nil {
			errs = append(errs, fmt.Sprintf("mpicc %s.c: %v\n%s", p, err, out))
		}
	}
	if len(errs) > 0 {
		mpiErr = strings.Join(errs, "\n")
		return
	}
	progDir = dir
}

// needMPI skips or fails t when the programs are not built.
func needMPI(t *testing.T) {
	t.Helper()
	if mpiErr != "" {
		t.Fatal(mpiErr)
	}
	if progDir == "" {
		t.Skip(mpiSkip)
	}
}

// needProvider skips or fails t when the provider is not built.
func needProvider(t *testing.T) {
	t.Helper()
	if provErr != "" {
		t.Fatal(provErr)
	}
	if provDir == "" {
		t.Skip(provSkip)
	}
}

// transports are those IWARPD_MPI_TRANSPORTS names (default: iwarpd, i.e.
// mtl ofi on the native RDM endpoint, and iwarpd+btl, i.e. pml ob1 with btl
// ofi and osc rdma on it).
func transports() []string {
	v := os.Getenv("IWARPD_MPI_TRANSPORTS")
	if v == "" {
		return []string{mpilaunch.IWARPD, mpilaunch.BTLOFI}
	}
	return strings.FieldsFunc(v, func(r rune) bool { return r == ',' || r == ' ' })
}
