package mpilaunch

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/iwarpd/iwarpd/internal/pinfork"
)

// Node is one "host" of a job.
type Node struct {
	NS   string   // network namespace ("" = the caller's)
	Addr string   // its address (two-namespace jobs: the host file's entry)
	Env  []string // VAR=VALUE for the ranks on this node (no spaces in values)
}

// Transport is how Open MPI moves messages: MCA parameters (name, value
// pairs) and environment for every process of the job.
type Transport struct {
	Name string
	MCA  [][2]string
	Env  []string
}

// Transport names.
const (
	IWARPD    = "iwarpd"         // mtl ofi over the provider's native RDM (RD queue pairs)
	IWARPDRxM = "iwarpd;ofi_rxm" // mtl ofi over libfabric's RxM on the provider's MSG endpoints (RC)
	TCP       = "tcp"            // mtl ofi over libfabric's tcp (tcp;ofi_rxm: 1.17's tcp has no native RDM)
	UDPRxD    = "udp;ofi_rxd"    // mtl ofi over libfabric's RxD on its udp provider
	OB1TCP    = "ob1+tcp"        // pml ob1 with the TCP BTL: no libfabric at all
	// BTLOFI is pml ob1 over Open MPI's btl ofi on the provider's native RDM
	// endpoint (messages, RDMA Write/Read, atomics) with osc rdma: MPI
	// one-sided communication as RDMA executed by the target's daemon.
	BTLOFI = "iwarpd+btl"
)

// NewTransport returns the named transport; provDir is the directory of
// libiwarpd-fi.so (FI_PROVIDER_PATH; "" when libfabric finds it itself),
// ifInclude the interface (CIDR or name) of Open MPI's own TCP traffic.
//
// Open MPI 4.1's mtl_ofi_provider_include matches by prefix
// (strncasecmp of the provider's name against each entry's length), so
// "iwarpd" also matches "iwarpd;ofi_rxm" and "iwarpd;ofi_rxd", which
// fi_getinfo lists first; include and exclude are mutually exclusive. The
// native provider is therefore selected with FI_PROVIDER=^ofi_rxm,ofi_rxd,
// which hides libfabric's utility providers from fi_getinfo.
func NewTransport(name, provDir, ifInclude string) (Transport, error) {
	t := Transport{Name: name}
	osc := [][2]string{{"osc", "pt2pt"}} // one-sided over the PML: osc rdma needs a BTL with RDMA (docs/mpi.md)
	if name == BTLOFI {
		osc = [][2]string{{"osc", "rdma"}}
	}
	common := [][2]string{
		{"orte_base_help_aggregate", "0"},
		{"btl_base_warn_component_unused", "0"},
		{"oob_tcp_if_include", ifInclude},
		{"mpi_yield_when_idle", "1"},
	}
	common = append(osc, common...)
	ofi := func(include string) {
		t.MCA = append([][2]string{{"pml", "cm"}, {"mtl", "ofi"}, {"mtl_ofi_provider_include", include}, {"btl", "self"}}, common...)
	}
	switch name {
	case IWARPD:
		ofi("iwarpd")
		t.Env = append(t.Env, "FI_PROVIDER=^ofi_rxm,ofi_rxd")
	case IWARPDRxM:
		ofi("iwarpd;ofi_rxm")
	case TCP:
		ofi("tcp")
	case UDPRxD:
		ofi("udp;ofi_rxd")
	case OB1TCP:
		t.MCA = append([][2]string{{"pml", "ob1"}, {"btl", "self,tcp"}, {"btl_tcp_if_include", ifInclude}}, common...)
	case BTLOFI:
		// btl_ofi_mode 2: messages as well as RDMA and atomics (the
		// default, 1, is one-sided only, and ob1 then has no BTL to send
		// to another node with). Open MPI 4.1's btl ofi matches
		// btl_ofi_provider_include by name, and refuses ofi_rxm itself;
		// FI_PROVIDER hides ofi_rxd, which would match too.
		t.MCA = append([][2]string{{"pml", "ob1"}, {"btl", "ofi,self,vader"}, {"btl_ofi_provider_include", "iwarpd"},
			{"btl_ofi_mode", "2"}}, common...)
		t.Env = append(t.Env, "FI_PROVIDER=^ofi_rxm,ofi_rxd")
	default:
		return t, fmt.Errorf("mpilaunch: unknown transport %q (want %s, %s, %s, %s, %s or %s)", name, IWARPD, IWARPDRxM,
			TCP, UDPRxD, OB1TCP, BTLOFI)
	}
	if provDir != "" && strings.HasPrefix(name, "iwarpd") {
		t.Env = append(t.Env, "FI_PROVIDER_PATH="+provDir)
	}
	return t, nil
}

// Job is one mpirun.
type Job struct {
	Nodes     []Node
	Ranks     int
	Transport Transport
	Prog      string
	Args      []string
	Dir       string   // where the host file and the namespace map are written
	NSRsh     string   // test/mpi/nsrsh.sh (two-namespace jobs)
	Extra     []string // more mpirun flags
	Env       []string // more environment for mpirun (and so every rank)
	// OneRankPerHost: every rank is a "host" of its own for Open MPI
	// (writeHosts), started through NSRsh, so that no two ranks share a
	// node: Open MPI 4.1's osc rdma then keeps no window state in a
	// shared-memory segment and takes no single-node path (docs/mpi.md,
	// "One-sided MPI").
	OneRankPerHost bool
}

// Available says why Open MPI cannot run here ("" when it can).
func Available() string {
	for _, tool := range []string{"mpirun", "mpicc"} {
		if _, err := exec.LookPath(tool); err != nil {
			return tool + " not found: run scripts/install-mpi-deps.sh (Debian openmpi-bin, libopenmpi-dev)"
		}
	}
	return ""
}

// BaseEnv is the caller's environment without Open MPI, libfabric and
// iwarpd settings, so that only what a Job says configures it.
func BaseEnv() []string {
	var env []string
	for _, kv := range os.Environ() {
		if strings.HasPrefix(kv, "OMPI_") || strings.HasPrefix(kv, "FI_") || strings.HasPrefix(kv, "IWARPD_") ||
			strings.HasPrefix(kv, "PMIX_") || strings.HasPrefix(kv, "IWMPI_") {
			continue
		}
		env = append(env, kv)
	}
	return env
}

func (j *Job) namespaces() bool {
	for _, n := range j.Nodes {
		if n.NS != "" {
			return true
		}
	}
	return false
}

// writeHosts writes the host file and namespace map of a job of one rank
// per host: rank r on node r mod len(Nodes); in two namespaces the first
// rank of each node under the node's address (rank 0's is mpirun's own),
// every other rank under a made-up name "iwmpi-NS-K" the map sends to the
// node's namespace; on loopback every rank under "iwmpi-lo-NODE-K" in the
// caller's namespace ("-" in the map).
func (j *Job) writeHosts() error {
	hosts, nsmap := &bytes.Buffer{}, &bytes.Buffer{}
	for r := 0; r < j.Ranks; r++ {
		i := r % len(j.Nodes)
		n := j.Nodes[i]
		ns, host := n.NS, n.Addr
		if ns == "" {
			ns = "-"
			host = fmt.Sprintf("iwmpi-lo-%d-%d", i, r/len(j.Nodes))
		} else if r >= len(j.Nodes) {
			host = fmt.Sprintf("iwmpi-%s-%d", n.NS, r/len(j.Nodes))
		}
		fmt.Fprintf(hosts, "%s slots=1\n", host)
		fmt.Fprintf(nsmap, "%s %s %s\n", host, ns, strings.Join(n.Env, " "))
	}
	if err := os.WriteFile(filepath.Join(j.Dir, "hostfile"), hosts.Bytes(), 0o644); err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(j.Dir, "nsmap"), nsmap.Bytes(), 0o644)
}

// Command returns the mpirun command of j (not started) and writes the
// files it needs into j.Dir. Its Args are the command line to show a user.
func (j *Job) Command(ctx context.Context) (*exec.Cmd, error) {
	if len(j.Nodes) == 0 || j.Ranks < 1 {
		return nil, errors.New("mpilaunch: a job needs nodes and ranks")
	}
	args := []string{"mpirun", "--allow-run-as-root", "--oversubscribe", "--bind-to", "none", "--tag-output"}
	for _, kv := range j.Transport.MCA {
		args = append(args, "--mca", kv[0], kv[1])
	}
	args = append(args, j.Extra...)
	env := append(append(BaseEnv(), j.Transport.Env...), j.Env...)
	var prefix []string
	if j.OneRankPerHost {
		if j.NSRsh == "" {
			return nil, errors.New("mpilaunch: a job of one rank per host needs NSRsh (test/mpi/nsrsh.sh)")
		}
		if err := j.writeHosts(); err != nil {
			return nil, err
		}
		// rtc_hwloc_vmhole none: the orteds of one machine would all write
		// hwloc's shared topology into one file (their session directory
		// is named after the machine's host name) and crash in
		// hwloc_shmem_topology_write.
		args = append(args, "--hostfile", filepath.Join(j.Dir, "hostfile"), "--map-by", "node", "--mca", "plm_rsh_agent", j.NSRsh,
			"--mca", "rtc_hwloc_vmhole", "none", "-np", fmt.Sprint(j.Ranks), j.Prog)
		args = append(args, j.Args...)
		env = append(env, "IWMPI_NSRSH_MAP="+filepath.Join(j.Dir, "nsmap"))
		if j.namespaces() {
			env = append(env, j.Nodes[0].Env...) // node 0's first rank is mpirun's child
			prefix = []string{"ip", "netns", "exec", j.Nodes[0].NS}
		}
	} else if j.namespaces() {
		if len(j.Nodes) != 2 || j.Nodes[0].NS == "" || j.Nodes[1].NS == "" {
			return nil, errors.New("mpilaunch: a namespace job needs exactly two nodes, each in a namespace")
		}
		if j.NSRsh == "" {
			return nil, errors.New("mpilaunch: a namespace job needs NSRsh (test/mpi/nsrsh.sh)")
		}
		hosts, nsmap := &bytes.Buffer{}, &bytes.Buffer{}
		slots := (j.Ranks + 1) / 2
		for _, n := range j.Nodes {
			fmt.Fprintf(hosts, "%s slots=%d\n", n.Addr, slots)
			fmt.Fprintf(nsmap, "%s %s %s\n", n.Addr, n.NS, strings.Join(n.Env, " "))
		}
		hf, mf := filepath.Join(j.Dir, "hostfile"), filepath.Join(j.Dir, "nsmap")
		if err := os.WriteFile(hf, hosts.Bytes(), 0o644); err != nil {
			return nil, err
		}
		if err := os.WriteFile(mf, nsmap.Bytes(), 0o644); err != nil {
			return nil, err
		}
		args = append(args, "--hostfile", hf, "--map-by", "node", "--mca", "plm_rsh_agent", j.NSRsh,
			"-np", fmt.Sprint(j.Ranks), j.Prog)
		args = append(args, j.Args...)
		env = append(env, "IWMPI_NSRSH_MAP="+mf)
		env = append(env, j.Nodes[0].Env...) // node 0's ranks are mpirun's children
		prefix = []string{"ip", "netns", "exec", j.Nodes[0].NS}
	} else {
		for r := 0; r < j.Ranks; r++ {
			if r > 0 {
				args = append(args, ":")
			}
			args = append(args, "-np", "1", "env")
			args = append(args, j.Nodes[r%len(j.Nodes)].Env...)
			args = append(args, j.Prog)
			args = append(args, j.Args...)
		}
	}
	all := append(prefix, args...)
	cmd := exec.CommandContext(ctx, all[0], all[1:]...)
	cmd.Env = env
	cmd.Dir = j.Dir
	// Cancel: SIGTERM makes mpirun kill its ranks and orteds (each rank
	// has a process group of its own, so killing mpirun's group is not
	// enough); SIGKILL 10 s later if it has not exited. Run then kills
	// what is left (killProg).
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	cmd.Cancel = func() error { return cmd.Process.Signal(syscall.SIGTERM) }
	cmd.WaitDelay = 10 * time.Second
	return cmd, nil
}

// Result is what a finished job printed and how it ended.
type Result struct {
	CommandLine string // the command line, for a user to repeat it
	Output      string // stdout and stderr, merged
	Err         error  // nil: exit status 0
	TimedOut    bool
}

// Run runs j to completion or until timeout; then it records where each
// rank is stuck (Stacks) and kills the job's process group (mpirun, the
// orteds and the ranks).
func Run(j *Job, timeout time.Duration) Result {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	cmd, err := j.Command(ctx)
	if err != nil {
		return Result{Err: err}
	}
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	r := Result{CommandLine: CommandLine(cmd)}
	if err := pinfork.Start(cmd); err != nil {
		r.Err = err
		return r
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	var stacks string
	select {
	case r.Err = <-done:
	case <-time.After(timeout):
		r.TimedOut = true
		stacks = Stacks(j.Prog)
		cancel() // kills the process group (Command's Cancel)
		err := <-done
		r.Err = fmt.Errorf("mpirun did not finish within %v (killed): %v", timeout, err)
	}
	// A killed mpirun leaves no orphans: its group goes too, and any rank
	// still running.
	syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
	if r.TimedOut {
		killProg(j.Prog)
	}
	r.Output = out.String()
	if stacks != "" {
		r.Output += "\n--- stacks of the ranks before the job was killed (gdb) ---\n" + stacks
	}
	return r
}

// progPIDs returns the PIDs of the running processes whose executable is
// prog (at most 64).
func progPIDs(prog string) []int {
	ents, err := os.ReadDir("/proc")
	if err != nil {
		return nil
	}
	var pids []int
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || len(pids) >= 64 {
			continue
		}
		if exe, err := os.Readlink("/proc/" + e.Name() + "/exe"); err == nil && exe == prog {
			pids = append(pids, pid)
		}
	}
	return pids
}

// killProg kills the ranks of a killed job: the processes running prog, a
// program the caller built in its own directory (bounded: 250 tries, 5 s).
func killProg(prog string) {
	for i := 0; i < 250; i++ {
		pids := progPIDs(prog)
		if len(pids) == 0 {
			return
		}
		for _, pid := range pids {
			syscall.Kill(pid, syscall.SIGKILL)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// Stacks returns the stack of every thread of every running process whose
// executable is prog (the ranks of a job), with gdb when installed ("" when
// none runs). Each gdb is bounded to 30 s; at most 16 processes.
func Stacks(prog string) string {
	gdb, err := exec.LookPath("gdb")
	if err != nil {
		return "(gdb not installed: no stacks)"
	}
	var b strings.Builder
	pids := progPIDs(prog)
	if len(pids) > 16 {
		pids = pids[:16]
	}
	for _, p := range pids {
		pid := strconv.Itoa(p)
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		out, _ := exec.CommandContext(ctx, gdb, "-p", pid, "-batch", "-ex", "thread apply all bt 20").CombinedOutput()
		cancel()
		fmt.Fprintf(&b, "== pid %s (%s)\n", pid, prog)
		// One block per thread; Open MPI's libevent threads (always in
		// event_base_loop) say nothing about a hang and are left out.
		var block []string
		flush := func() {
			if len(block) > 0 && !strings.Contains(strings.Join(block, "\n"), "event_base_loop") {
				b.WriteString(strings.Join(block, "\n") + "\n")
			}
			block = block[:0]
		}
		for _, line := range strings.Split(string(out), "\n") {
			switch {
			case strings.HasPrefix(line, "Thread "):
				flush()
				block = append(block, line)
			case strings.HasPrefix(line, "#"):
				block = append(block, line)
			}
		}
		flush()
	}
	return b.String()
}

// CommandLine renders cmd as a shell line with the environment it sets
// beyond the caller's (the variables a user must set to repeat it).
func CommandLine(cmd *exec.Cmd) string {
	var b strings.Builder
	base := map[string]bool{}
	for _, kv := range os.Environ() {
		base[kv] = true
	}
	for _, kv := range cmd.Env {
		if !base[kv] {
			b.WriteString(quote(kv) + " ")
		}
	}
	for i, a := range cmd.Args {
		if i > 0 {
			b.WriteByte(' ')
		}
		b.WriteString(quote(a))
	}
	return b.String()
}

func quote(s string) string {
	if s != "" && !strings.ContainsAny(s, " ;'\"\\$*?^&|<>()") {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}
