package libfabric

import (
	"net"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/iwarpd/iwarpd/test/daemontest"
)

// listing parses `fi_info` output into provider name -> endpoint types.
func listing(out string) map[string][]string {
	m := map[string][]string{}
	prov := ""
	for _, line := range strings.Split(out, "\n") {
		f := strings.Fields(line)
		if len(f) != 2 {
			continue
		}
		switch f[0] {
		case "provider:":
			prov = f[1]
		case "type:":
			if prov != "" && !slices.Contains(m[prov], f[1]) {
				m[prov] = append(m[prov], f[1])
			}
		}
	}
	return m
}

// TestFiInfo is acceptance point 1 of issue 10: `fi_info -p iwarpd` lists
// rdm, dgram and msg; iwarpd;ofi_rxd and iwarpd;ofi_rxm list rdm.
func TestFiInfo(t *testing.T) {
	needProvider(t)
	d := daemon(t, "a", daemontest.Options{})
	cmd := exec.Command("fi_info", "-p", "iwarpd")
	cmd.Env = fiEnv(d)
	out, err := run(t, cmd, daemontest.Scaled(30*time.Second))
	if err != nil {
		t.Fatalf("fi_info -p iwarpd: %v\n%s", err, out)
	}
	got := listing(out)
	want := map[string][]string{
		"iwarpd":         {"FI_EP_RDM", "FI_EP_DGRAM", "FI_EP_MSG"},
		"iwarpd;ofi_rxd": {"FI_EP_RDM"},
		"iwarpd;ofi_rxm": {"FI_EP_RDM"},
	}
	for prov, types := range want {
		for _, ty := range types {
			if !slices.Contains(got[prov], ty) {
				t.Errorf("fi_info -p iwarpd: provider %q lacks %s (it lists %v)\n%s", prov, ty, got[prov], out)
			}
		}
	}

	// The verbose listing of the native RDM endpoint: the capabilities
	// MPI needs and the device's address as src_addr.
	cmd = exec.Command("fi_info", "-p", "iwarpd", "-t", "FI_EP_RDM", "-v")
	cmd.Env = fiEnv(d, "FI_PROVIDER=^ofi_rxm,ofi_rxd")
	out, err = run(t, cmd, daemontest.Scaled(30*time.Second))
	if err != nil {
		t.Fatalf("fi_info -v: %v\n%s", err, out)
	}
	for _, s := range []string{"FI_TAGGED", "FI_DIRECTED_RECV", "FI_MULTI_RECV", "FI_SOURCE", "FI_SOCKADDR_IN",
		"fi_sockaddr_in://127.0.0.1:0", "Provider specific", "FI_THREAD_SAFE"} {
		if !strings.Contains(out, s) {
			t.Errorf("fi_info -v for FI_EP_RDM lacks %s\n%s", s, out)
		}
	}
}

// TestFiInfoNoDaemon: without a daemon the provider lists nothing, fails
// promptly, and never hangs the application.
func TestFiInfoNoDaemon(t *testing.T) {
	needProvider(t)
	cmd := exec.Command("fi_info", "-p", "iwarpd")
	cmd.Env = append(daemontest.CleanEnv(), "FI_PROVIDER_PATH="+provDir,
		"FI_IWARPD_SOCKET="+filepath.Join(t.TempDir(), "none.sock"), "FI_LOG_LEVEL=info")
	out, err := run(t, cmd, daemontest.Scaled(20*time.Second))
	if err == nil {
		t.Fatalf("fi_info -p iwarpd without a daemon succeeded:\n%s", out)
	}
	if _, ok := err.(*exec.ExitError); !ok {
		t.Fatalf("fi_info without a daemon: %v", err)
	}
	if !strings.Contains(out, "no iwarpd daemon answers at") || !strings.Contains(out, "FI_IWARPD_SOCKET") {
		t.Errorf("the provider's log does not tell the user what to do:\n%s", out)
	}
}

// TestNoDaemonWarns is issue 19 item 8: with no daemon, FI_LOG_LEVEL=warn
// (not only info) prints one warning per process that names the socket
// path, the variable that sets it and the command that starts the daemon,
// whether the socket is missing or refuses (a stale socket file whose
// daemon is gone).
func TestNoDaemonWarns(t *testing.T) {
	needProvider(t)
	dir := t.TempDir()
	stale := filepath.Join(dir, "stale.sock")
	l, err := net.Listen("unixpacket", stale)
	if err != nil {
		t.Fatal(err)
	}
	l.(*net.UnixListener).SetUnlinkOnClose(false)
	l.Close() // the file stays, nothing listens: connect is refused
	for _, c := range []struct{ name, sock string }{
		{"missing", filepath.Join(dir, "none.sock")},
		{"refused", stale},
	} {
		t.Run(c.name, func(t *testing.T) {
			// fi_info asks for every endpoint type: the provider
			// tries the daemon more than once, and warns once.
			cmd := exec.Command("fi_info", "-p", "iwarpd")
			cmd.Env = append(daemontest.CleanEnv(), "FI_PROVIDER_PATH="+provDir, "FI_IWARPD_SOCKET="+c.sock,
				"FI_LOG_LEVEL=warn")
			out, err := run(t, cmd, daemontest.Scaled(20*time.Second))
			if _, ok := err.(*exec.ExitError); !ok {
				t.Fatalf("fi_info without a daemon: %v\n%s", err, out)
			}
			want := "no iwarpd daemon answers at " + c.sock
			if n := strings.Count(out, want); n != 1 {
				t.Errorf("FI_LOG_LEVEL=warn: %d lines with %q, want 1:\n%s", n, want, out)
			}
			for _, w := range []string{"iwarpd -socket " + c.sock, "FI_IWARPD_SOCKET"} {
				if !strings.Contains(out, w) {
					t.Errorf("the warning does not say %q:\n%s", w, out)
				}
			}
		})
	}
}
