package libfabric

import (
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

// unprivUID runs the unprivileged side (no passwd entry needed), as
// test/hostile does.
const unprivUID = 1001

// TestGetinfoPrivilegedPort (issue 19 item 3): fi_getinfo refuses what
// fi_endpoint would. The daemon refuses an explicit port below
// net.ipv4.ip_unprivileged_port_start (ip(7)) to a client that could not
// bind it itself (docs/security.md), so fi_getinfo of a process of uid
// 1001 asking for such a source port returns -FI_ENODATA with a warning
// that says why; root's gets the infos, and so does uid 1001's for an
// unprivileged port.
func TestGetinfoPrivilegedPort(t *testing.T) {
	needProvider(t)
	if os.Geteuid() != 0 {
		t.Skip("needs root to run fi_info as another user")
	}
	start := unprivPortStart(t)
	if start == 0 {
		t.Skip("net.ipv4.ip_unprivileged_port_start is 0: no port is privileged here")
	}
	priv := strconv.Itoa(start - 1)
	free := strconv.Itoa(freeTriple(t) + 1)
	d := daemon(t, "privport", daemontest.Options{Extra: []string{"-socket-mode", "0666"}})
	openToOthers(t, filepath.Dir(d.Sock))
	openToOthers(t, provDir)

	for _, tc := range []struct {
		name string
		uid  int
		port string
		ok   bool
	}{
		{"uid 1001, privileged port", unprivUID, priv, false},
		{"uid 1001, unprivileged port", unprivUID, free, true},
		{"root, privileged port", 0, priv, true},
	} {
		cmd := exec.Command("fi_info", "-p", "iwarpd", "-s", "127.0.0.1", "-P", tc.port)
		cmd.Env = fiEnv(d, "FI_LOG_LEVEL=warn")
		if tc.uid != 0 {
			cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: uint32(tc.uid), Gid: uint32(tc.uid)}}
		}
		out, err := run(t, cmd, daemontest.Scaled(20*time.Second))
		why := "source port " + tc.port + " is privileged"
		switch {
		case tc.ok && (err != nil || !strings.Contains(out, "FI_EP_RDM")):
			t.Errorf("%s: fi_info: %v, want the provider's infos:\n%s", tc.name, err, out)
		case !tc.ok && (err == nil || strings.Contains(out, "FI_EP_")):
			t.Errorf("%s: fi_info: %v, want no info (-FI_ENODATA):\n%s", tc.name, err, out)
		case !tc.ok && (!strings.Contains(out, "No data available") || !strings.Contains(out, why)):
			t.Errorf("%s: want fi_getinfo's -FI_ENODATA and a warning saying %q:\n%s", tc.name, why, out)
		case tc.ok && strings.Contains(out, why):
			t.Errorf("%s: warned %q:\n%s", tc.name, why, out)
		}
	}
	d.CheckAlive(t)
}

// unprivPortStart is the kernel's net.ipv4.ip_unprivileged_port_start.
func unprivPortStart(t *testing.T) int {
	t.Helper()
	b, err := os.ReadFile("/proc/sys/net/ipv4/ip_unprivileged_port_start")
	if err != nil {
		return 1024
	}
	n, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil {
		t.Fatalf("ip_unprivileged_port_start %q: %v", b, err)
	}
	return n
}

// openToOthers makes dir and its parents up to the temporary directory
// 0755, so another uid reaches what is in it.
func openToOthers(t *testing.T, dir string) {
	t.Helper()
	for ; dir != "/" && dir != os.TempDir(); dir = filepath.Dir(dir) {
		if err := os.Chmod(dir, 0o755); err != nil {
			t.Fatal(err)
		}
	}
}
