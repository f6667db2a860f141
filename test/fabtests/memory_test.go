package fabtests

import (
	"bufio"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/iwarpd/iwarpd/test/daemontest"
)

// TestRefusedConnectionMemory (issue 19 item 2): an iwarpd;ofi_rxm client
// sending to a port nobody listens on retries the refused connection for
// as long as it runs; its memory must stay bounded however often it
// retries. ofi_rxm posts rx_attr->size receive buffers of its own (about
// 4 MiB) on every connection and takes them back only from the flush
// completions it reads right after fi_close; the provider gave none, and
// the client grew by those buffers at every attempt (without the flush
// completions: 123 to 405 MiB over 80 attempts, docs/libfabric.md).
//
// The client runs with -S 1024: without -S fi_rdm_pingpong's own message
// buffer is 1 GiB (8 MiB, its largest size, times its window of 64, for
// sending and receiving), allocated and zeroed at start over any provider
// (tcp too); that, not the provider, is what this test measured before.
// Attempts are counted by the daemon's QP handles (one session counter
// for every object, about 4 per attempt); the test runs until the client
// has made about 75 attempts, its VmRSS sampled, under prlimit --as (2 GB).
func TestRefusedConnectionMemory(t *testing.T) {
	if buildErr != "" {
		t.Fatal(buildErr)
	}
	if provDir == "" {
		t.Skip(skipWhy)
	}
	const wantHandles = 300    // about 75 connection attempts
	const boundKiB = 224 << 10 // the fixed client stays at 86-135 MiB; leaking, it passes 350
	d := daemontest.Start(t, "fabtests-mem", daemontest.Options{Ports: ciUDPorts, Extra: []string{"-rd-ports", ciRDPorts}})
	env := []string{"FI_PROVIDER_PATH=" + provDir, "FI_IWARPD_SOCKET=" + d.Sock}
	for _, kv := range daemontest.CleanEnv() {
		if !strings.HasPrefix(kv, "FI_") {
			env = append(env, kv)
		}
	}
	// ciPortBase+99: a port of the package's block (configuration 0's, tcp, not run here) nobody listens on.
	cmd := exec.Command("prlimit", "--as=2000000000", "--", filepath.Join(suiteDir, "bin", "fi_rdm_pingpong"),
		"-p", "iwarpd;ofi_rxm", "-I", "5", "-S", "1024", "-P", strconv.Itoa(ciPortBase+99), "-s", "127.0.0.1", "127.0.0.1")
	cmd.Env = env
	out := &tailBuffer{max: 8 << 10}
	cmd.Stdout, cmd.Stderr = out, out
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	var maxRSS int64
	var handle uint32
	exited := false
	guard := time.After(daemontest.Scaled(90 * time.Second)) // only stops a hang
	for !exited && handle < wantHandles {
		select {
		case <-done:
			exited = true
		case <-guard:
			syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
			<-done
			t.Fatalf("the client made only about %d connection attempts (QP handle %d) before the guard; largest VmRSS %d KiB\n%s",
				handle/4, handle, maxRSS, out.String())
		case <-time.After(200 * time.Millisecond):
			if kb := vmRSS(cmd.Process.Pid); kb > maxRSS {
				maxRSS = kb
			}
			if h := largestQPHandle(t, d.Sock); h > handle {
				handle = h
			}
		}
	}
	if !exited {
		syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		<-done
	}
	t.Logf("largest VmRSS %d KiB over about %d connection attempts (QP handle %d); exited on its own: %v\n%s",
		maxRSS, handle/4, handle, exited, out.String())
	if exited {
		t.Errorf("the client exited instead of retrying the refused connection")
	}
	if maxRSS > boundKiB {
		t.Errorf("the client reached %d KiB resident retrying a refused connection (bound: %d KiB)", maxRSS, boundKiB)
	}
	if strings.Contains(out.String(), "Cannot allocate memory") {
		t.Errorf("the client ran out of memory retrying a refused connection")
	}
	d.CheckAlive(t)
}

// largestQPHandle is the largest handle among the daemon's QPs (iwarpctl
// -json qps; 0 when there is none). Handles come from one counter per
// session, never reused (rnic.Session.NextHandleID).
func largestQPHandle(t *testing.T, sock string) uint32 {
	t.Helper()
	b, err := exec.Command(daemontest.Bins["iwarpctl"], "-socket", sock, "-json", "qps").Output()
	if err != nil {
		t.Fatalf("iwarpctl qps: %v", err)
	}
	var qps []struct {
		Handle uint32 `json:"handle"`
	}
	if err := json.Unmarshal(b, &qps); err != nil {
		t.Fatalf("iwarpctl -json qps: %v: %s", err, b)
	}
	var h uint32
	for _, q := range qps {
		h = max(h, q.Handle)
	}
	return h
}

// vmRSS is a process's resident set in KiB (0 when it is gone).
func vmRSS(pid int) int64 {
	f, err := os.Open("/proc/" + strconv.Itoa(pid) + "/status")
	if err != nil {
		return 0
	}
	defer f.Close()
	s := bufio.NewScanner(f)
	for s.Scan() {
		if v, ok := strings.CutPrefix(s.Text(), "VmRSS:"); ok {
			n, _ := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
			return n
		}
	}
	return 0
}
