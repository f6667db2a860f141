package main

import (
	"bytes"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/iwarpd/iwarpd/internal/testwait"
	"github.com/iwarpd/iwarpd/test/mpi/mpilaunch"
)

func TestInheritRankEnv(t *testing.T) {
	environ := []string{"PATH=/bin", "FI_PROVIDER=tcp", "FI_IWARPD_FASTPATH_RDM=0", "IWARPD_QP_SOCKET=daemon",
		"FI_IWARPD_SOCKET=/elsewhere.sock", "IWARPD_SOCKET=/x.sock", "FI_IWARPD_EAGER_MAX=1", "FI_IWARPD_IDLE=a b"}
	pass, left := inheritRankEnv(environ, []string{"FI_IWARPD_EAGER_MAX=2"})
	if want := []string{"FI_IWARPD_FASTPATH_RDM=0", "IWARPD_QP_SOCKET=daemon"}; !reflect.DeepEqual(pass, want) {
		t.Errorf("passed %q, want %q", pass, want)
	}
	got := strings.Join(left, "; ")
	for _, want := range []string{"FI_IWARPD_SOCKET (names a daemon", "IWARPD_SOCKET (names a daemon",
		"FI_IWARPD_EAGER_MAX (-mpi-env sets it)", "FI_IWARPD_IDLE (its value has white space"} {
		if !strings.Contains(got, want) {
			t.Errorf("left out %q, want it to say %q", got, want)
		}
	}
}

// TestRankEnvReachesRanks: FI_IWARPD_* set in iwarp-bench's environment
// reach every rank of a real mpirun job built as the MPI section builds
// its jobs (mpiEnv.job), -mpi-env wins for what it names, the daemon's
// socket stays the bench's, and the section's start says what was passed.
func TestRankEnvReachesRanks(t *testing.T) {
	if why := mpilaunch.Available(); why != "" {
		t.Skip(why)
	}
	dir := t.TempDir()
	for _, name := range []string{"iwarpd", "iwarp-perf"} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte("#!/bin/sh\n"), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	t.Setenv("FI_IWARPD_FASTPATH_RDM", "0")
	t.Setenv("FI_IWARPD_EAGER_MAX", "1024")
	t.Setenv("FI_IWARPD_SOCKET", "/not/the/bench/daemon.sock")
	var stderr bytes.Buffer
	cfg, err := parseConfig([]string{"-bin", dir, "-quick", "-mpi-env", "FI_IWARPD_EAGER_MAX=65536"}, &stderr)
	if err != nil {
		t.Fatalf("parseConfig: %v\n%s", err, stderr.String())
	}
	var progress bytes.Buffer
	reportRankEnv(&cfg.MPI, &progress)
	for _, want := range []string{"every rank gets from iwarp-bench's environment: FI_IWARPD_FASTPATH_RDM=0",
		"FI_IWARPD_SOCKET (names a daemon", "FI_IWARPD_EAGER_MAX (-mpi-env sets it)", "(-mpi-env): FI_IWARPD_EAGER_MAX=65536"} {
		if !strings.Contains(progress.String(), want) {
			t.Errorf("the section's start says %q, want %q", progress.String(), want)
		}
	}
	if d := cfg.describe(); !strings.Contains(d, "FI_IWARPD_FASTPATH_RDM=0") {
		t.Errorf("the report's config line %q does not name the ranks' FI_IWARPD_FASTPATH_RDM=0", d)
	}

	prog := filepath.Join(dir, "printenv.sh")
	script := "#!/bin/sh\nenv | grep -E '^(FI_IWARPD|IWARPD)_' | sed \"s/^/RANKENV $OMPI_COMM_WORLD_RANK /\"\n"
	if err := os.WriteFile(prog, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	e := &mpiEnv{cfg: &cfg, dir: dir, iface: "lo", prog: prog}
	j, err := e.job(mpilaunch.OB1TCP, 2, nil)
	if err != nil {
		t.Fatal(err)
	}
	r := mpilaunch.Run(j, testwait.Scaled(60*time.Second))
	if r.Err != nil {
		t.Fatalf("mpirun: %v\n%s\n%s", r.Err, r.CommandLine, r.Output)
	}
	for _, rank := range []string{"0", "1"} {
		env := map[string]string{}
		for _, l := range strings.Split(r.Output, "\n") {
			_, rest, ok := strings.Cut(l, "RANKENV "+rank+" ")
			if k, v, ok2 := strings.Cut(rest, "="); ok && ok2 {
				env[k] = v
			}
		}
		if env["FI_IWARPD_FASTPATH_RDM"] != "0" || env["FI_IWARPD_EAGER_MAX"] != "65536" || env["FI_IWARPD_SOCKET"] != "" {
			t.Errorf("rank %s's environment %v: want FI_IWARPD_FASTPATH_RDM=0 (inherited), FI_IWARPD_EAGER_MAX=65536 "+
				"(-mpi-env) and no FI_IWARPD_SOCKET (no daemon here)\n%s", rank, env, r.Output)
		}
	}
}
