package mpilaunch

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
)

func TestNewTransport(t *testing.T) {
	tr, err := NewTransport(IWARPD, "/prov", "10.0.0.0/24")
	if err != nil {
		t.Fatal(err)
	}
	// The native provider needs the utility providers hidden (Open MPI
	// matches mtl_ofi_provider_include by prefix).
	if !slices.Contains(tr.Env, "FI_PROVIDER=^ofi_rxm,ofi_rxd") || !slices.Contains(tr.Env, "FI_PROVIDER_PATH=/prov") {
		t.Errorf("iwarpd env %q", tr.Env)
	}
	if !slices.Contains(tr.MCA, [2]string{"mtl_ofi_provider_include", "iwarpd"}) || !slices.Contains(tr.MCA, [2]string{"pml", "cm"}) {
		t.Errorf("iwarpd MCA %q", tr.MCA)
	}
	rxm, _ := NewTransport(IWARPDRxM, "/prov", "lo")
	if slices.ContainsFunc(rxm.Env, func(s string) bool { return strings.HasPrefix(s, "FI_PROVIDER=") }) ||
		!slices.Contains(rxm.MCA, [2]string{"mtl_ofi_provider_include", "iwarpd;ofi_rxm"}) {
		t.Errorf("iwarpd;ofi_rxm: env %q MCA %q", rxm.Env, rxm.MCA)
	}
	ob1, _ := NewTransport(OB1TCP, "/prov", "lo")
	if !slices.Contains(ob1.MCA, [2]string{"pml", "ob1"}) || len(ob1.Env) != 0 {
		t.Errorf("ob1+tcp: env %q MCA %q", ob1.Env, ob1.MCA)
	}
	if _, err := NewTransport("verbs", "", "lo"); err == nil {
		t.Error("unknown transport accepted")
	}
}

func TestCommandNamespaces(t *testing.T) {
	dir := t.TempDir()
	tr, _ := NewTransport(TCP, "", "169.254.1.0/24")
	j := &Job{Ranks: 3, Transport: tr, Prog: "/p", Args: []string{"x"}, Dir: dir, NSRsh: "/nsrsh.sh", Nodes: []Node{
		{NS: "nsa", Addr: "169.254.1.1", Env: []string{"A=1"}},
		{NS: "nsb", Addr: "169.254.1.2", Env: []string{"B=2", "C=3"}},
	}}
	cmd, err := j.Command(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	line := strings.Join(cmd.Args, " ")
	for _, want := range []string{"ip netns exec nsa mpirun ", "--map-by node", "--mca plm_rsh_agent /nsrsh.sh", "-np 3 /p x"} {
		if !strings.Contains(line, want) {
			t.Errorf("command %q lacks %q", line, want)
		}
	}
	if !slices.Contains(cmd.Env, "A=1") || slices.Contains(cmd.Env, "B=2") {
		t.Errorf("mpirun's environment (node 0's ranks): %q", cmd.Env)
	}
	hosts, _ := os.ReadFile(filepath.Join(dir, "hostfile"))
	nsmap, _ := os.ReadFile(filepath.Join(dir, "nsmap"))
	if string(hosts) != "169.254.1.1 slots=2\n169.254.1.2 slots=2\n" {
		t.Errorf("hostfile %q", hosts)
	}
	if string(nsmap) != "169.254.1.1 nsa A=1\n169.254.1.2 nsb B=2 C=3\n" {
		t.Errorf("nsmap %q", nsmap)
	}
}

func TestCommandLoopback(t *testing.T) {
	tr, _ := NewTransport(IWARPD, "/prov", "lo")
	j := &Job{Ranks: 3, Transport: tr, Prog: "/p", Dir: t.TempDir(), Nodes: []Node{
		{Addr: "127.0.0.1", Env: []string{"S=a"}}, {Addr: "127.0.0.1", Env: []string{"S=b"}},
	}}
	cmd, err := j.Command(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	line := strings.Join(cmd.Args, " ")
	// Ranks alternate between the nodes: one application context each.
	if !strings.HasSuffix(line, "-np 1 env S=a /p : -np 1 env S=b /p : -np 1 env S=a /p") || cmd.Args[0] != "mpirun" {
		t.Errorf("command %q", line)
	}
}

// TestRunTimeout: a job that deadlocks is killed at its timeout, with the
// ranks' stacks (where they hang) in its output, and leaves no process.
func TestRunTimeout(t *testing.T) {
	if why := Available(); why != "" {
		t.Skip(why)
	}
	dir := t.TempDir()
	prog := filepath.Join(dir, "deadlock")
	if out, err := exec.Command("mpicc", "-o", prog, "testdata/deadlock.c").CombinedOutput(); err != nil {
		t.Fatalf("mpicc: %v\n%s", err, out)
	}
	tr, _ := NewTransport(OB1TCP, "", "lo")
	j := &Job{Ranks: 2, Transport: tr, Prog: prog, Dir: dir, Nodes: []Node{{Addr: "127.0.0.1"}, {Addr: "127.0.0.1"}}}
	timeout := 20 * time.Second
	if f, err := strconv.ParseFloat(os.Getenv("IWARPD_TEST_TIMEOUT_SCALE"), 64); err == nil && f > 0 {
		timeout = time.Duration(float64(timeout) * f)
	}
	r := Run(j, timeout)
	if !r.TimedOut || r.Err == nil {
		t.Fatalf("deadlocked job: timed out %v, err %v\n%s", r.TimedOut, r.Err, r.Output)
	}
	if _, err := exec.LookPath("gdb"); err == nil && !strings.Contains(r.Output, "MPI_Recv") {
		t.Errorf("no MPI_Recv in the stacks:\n%s", r.Output)
	}
	// Killed processes may take a moment to go (bounded wait).
	for i := 0; i < 100 && len(progPIDs(prog)) > 0; i++ {
		time.Sleep(50 * time.Millisecond)
	}
	if pids := progPIDs(prog); len(pids) > 0 {
		for _, p := range pids {
			st, _ := os.ReadFile(fmt.Sprintf("/proc/%d/stat", p))
			t.Errorf("rank %d still running 5 s after Run returned: %s", p, st)
		}
		killProg(prog)
	}
}

func TestCommandOneRankPerHost(t *testing.T) {
	tr, _ := NewTransport(BTLOFI, "", "169.254.1.0/24")
	for _, tc := range []struct {
		name         string
		nodes        []Node
		hosts, nsmap string
		prefix       string
	}{
		{"namespaces", []Node{{NS: "nsa", Addr: "169.254.1.1", Env: []string{"A=1"}}, {NS: "nsb", Addr: "169.254.1.2", Env: []string{"B=2"}}},
			"169.254.1.1 slots=1\n169.254.1.2 slots=1\niwmpi-nsa-1 slots=1\niwmpi-nsb-1 slots=1\n",
			"169.254.1.1 nsa A=1\n169.254.1.2 nsb B=2\niwmpi-nsa-1 nsa A=1\niwmpi-nsb-1 nsb B=2\n", "ip netns exec nsa mpirun "},
		{"loopback", []Node{{Addr: "127.0.0.1", Env: []string{"A=1"}}, {Addr: "127.0.0.1", Env: []string{"B=2"}}},
			"iwmpi-lo-0-0 slots=1\niwmpi-lo-1-0 slots=1\niwmpi-lo-0-1 slots=1\niwmpi-lo-1-1 slots=1\n",
			"iwmpi-lo-0-0 - A=1\niwmpi-lo-1-0 - B=2\niwmpi-lo-0-1 - A=1\niwmpi-lo-1-1 - B=2\n", "mpirun "},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			j := &Job{Ranks: 4, Transport: tr, Prog: "/p", Dir: dir, NSRsh: "/nsrsh.sh", Nodes: tc.nodes, OneRankPerHost: true}
			cmd, err := j.Command(context.Background())
			if err != nil {
				t.Fatal(err)
			}
			line := strings.Join(cmd.Args, " ")
			for _, want := range []string{tc.prefix, "--mca osc rdma", "--mca btl_ofi_mode 2", "--mca rtc_hwloc_vmhole none", "-np 4 /p"} {
				if !strings.HasPrefix(line, tc.prefix) || !strings.Contains(line, want) {
					t.Errorf("command %q lacks %q", line, want)
				}
			}
			hosts, _ := os.ReadFile(filepath.Join(dir, "hostfile"))
			nsmap, _ := os.ReadFile(filepath.Join(dir, "nsmap"))
			if string(hosts) != tc.hosts || string(nsmap) != tc.nsmap {
				t.Errorf("hostfile %q, nsmap %q", hosts, nsmap)
			}
		})
	}
}
