package fabtests

import (
	"bufio"
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
// as long as it runs; its resident memory must stay bounded. ofi_rxm posts
// rx_attr->size receive buffers on every connection and takes them back
// only from the flush completions read after fi_close; the provider gave
// none, and the client grew about 1 GB/s until its address-space cap. The
// client runs under prlimit --as (2 GB) for a few seconds, VmRSS sampled.
// With the flush completions it still grows (1.07 GB in 6 s, 15:03 UTC
// 2026-11-28): a known failure until the rest is found.
func TestRefusedConnectionMemory(t *testing.T) {
	if buildErr != "" {
		t.Fatal(buildErr)
	}
	if provDir == "" {
		t.Skip(skipWhy)
	}
	if os.Getenv("IWARPD_FI_KNOWN") != "1" {
		t.Skip("KNOWN FAILURE (issue 19 item 2, IWARPD_FI_KNOWN=1 runs it): the client still reaches about 1 GB " +
			"resident in 6 s with the flush completions on fi_close; the leak is elsewhere")
	}
	d := daemontest.Start(t, "fabtests-mem", daemontest.Options{Ports: ciUDPorts, Extra: []string{"-rd-ports", ciRDPorts}})
	env := []string{"FI_PROVIDER_PATH=" + provDir, "FI_IWARPD_SOCKET=" + d.Sock}
	for _, kv := range daemontest.CleanEnv() {
		if !strings.HasPrefix(kv, "FI_") {
			env = append(env, kv)
		}
	}
	// ciPortBase+99: a port of the package's block (configuration 0's, tcp, not run here) nobody listens on.
	cmd := exec.Command("prlimit", "--as=2000000000", "--", filepath.Join(suiteDir, "bin", "fi_rdm_pingpong"),
		"-p", "iwarpd;ofi_rxm", "-I", "5", "-P", strconv.Itoa(ciPortBase+99), "-s", "127.0.0.1", "127.0.0.1")
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
	exited := false
	for i := 0; i < 24 && !exited; i++ { // 6 s in quarter seconds
		select {
		case <-done:
			exited = true
		case <-time.After(250 * time.Millisecond):
			if kb := vmRSS(cmd.Process.Pid); kb > maxRSS {
				maxRSS = kb
			}
		}
	}
	if !exited {
		syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		<-done
	}
	t.Logf("largest VmRSS %d KiB; exited on its own: %v\n%s", maxRSS, exited, out.String())
	if maxRSS > 512<<10 {
		t.Errorf("the client reached %d KiB resident retrying a refused connection (bound: 512 MiB)", maxRSS)
	}
	if strings.Contains(out.String(), "Cannot allocate memory") {
		t.Errorf("the client ran out of memory retrying a refused connection")
	}
	d.CheckAlive(t)
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
