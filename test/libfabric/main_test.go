package libfabric

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/iwarpd/iwarpd/test/daemontest"
	"github.com/iwarpd/iwarpd/test/netns"
)

// Port blocks of this package (doc.go).
const (
	udPortBase  = 27800
	rdPortBase  = 27900
	portBlock   = 25
	portBlocks  = 4
	ctrlPortLo  = 28000
	ctrlPortCnt = 100
)

var (
	nextBlock atomic.Int32
	nextCtrl  atomic.Int32
	provDir   string // holds libiwarpd-fi.so ("" when it could not be built: skipWhy says why)
	skipWhy   string
	buildErr  string
)

func ports() (ud, rd string) {
	b := int(nextBlock.Add(1)-1) % portBlocks
	u, r := udPortBase+b*portBlock, rdPortBase+b*portBlock
	return fmt.Sprintf("%d-%d", u, u+portBlock-1), fmt.Sprintf("%d-%d", r, r+portBlock-1)
}

// ctrlPort is the next TCP port for an fi_pingpong control connection.
func ctrlPort() int { return ctrlPortLo + int(nextCtrl.Add(1)-1)%ctrlPortCnt }

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "iwarpd-libfabric-")
	if err != nil {
		fmt.Fprintln(os.Stderr, "libfabric:", err)
		os.Exit(1)
	}
	code := 1
	if err := daemontest.Build(dir); err != nil {
		fmt.Fprintln(os.Stderr, "libfabric:", err)
	} else {
		buildProvider(filepath.Join(dir, "c"))
		code = m.Run()
	}
	os.RemoveAll(dir)
	os.Exit(code)
}

func buildProvider(dir string) {
	for _, tool := range []string{"cc", "make", "pkg-config", "fi_info", "fi_pingpong"} {
		if _, err := exec.LookPath(tool); err != nil {
			skipWhy = tool + " not found; run scripts/install-test-deps.sh"
			return
		}
	}
	if _, err := os.Stat("/usr/include/rdma/providers/fi_prov.h"); err != nil {
		skipWhy = "libfabric-dev not installed; run scripts/install-test-deps.sh"
		return
	}
	if err := exec.Command("pkg-config", "--exists", "jansson").Run(); err != nil {
		skipWhy = "libjansson-dev not installed; run scripts/install-test-deps.sh"
		return
	}
	root, err := daemontest.ModuleRoot()
	if err != nil {
		buildErr = err.Error()
		return
	}
	cmd := exec.Command("make", "-C", filepath.Join(root, "c"), "-s", "BUILD="+dir, "prov")
	if out, err := cmd.CombinedOutput(); err != nil {
		buildErr = fmt.Sprintf("make -C c prov: %v\n%s", err, out)
		return
	}
	provDir = dir
}

// needProvider skips or fails t when the provider is not available.
func needProvider(t *testing.T) {
	t.Helper()
	if buildErr != "" {
		t.Fatal(buildErr)
	}
	if provDir == "" {
		t.Skip(skipWhy)
	}
}

// daemon starts one iwarpd with private UD and RD port blocks.
func daemon(t *testing.T, name string, o daemontest.Options) *daemontest.Daemon {
	t.Helper()
	ud, rd := ports()
	o.Ports = ud
	o.Extra = append(o.Extra, "-rd-ports", rd)
	return daemontest.Start(t, name, o)
}

// fiEnv is the environment of a libfabric program using daemon d: the
// provider found through FI_PROVIDER_PATH, the daemon through
// FI_IWARPD_SOCKET.
func fiEnv(d *daemontest.Daemon, extra ...string) []string {
	env := []string{}
	for _, kv := range daemontest.CleanEnv() {
		if !strings.HasPrefix(kv, "FI_") {
			env = append(env, kv)
		}
	}
	env = append(env, "FI_PROVIDER_PATH="+provDir, "FI_IWARPD_SOCKET="+d.Sock)
	return append(env, extra...)
}

// run runs cmd to completion within timeout and returns its combined output.
func run(t *testing.T, cmd *exec.Cmd, timeout time.Duration) (string, error) {
	t.Helper()
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		return "", err
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		return out.String(), err
	case <-time.After(timeout):
		cmd.Process.Kill()
		<-done
		return out.String(), fmt.Errorf("%s did not finish within %v", cmd.Path, timeout)
	}
}

// command runs name in namespace idx of pair (or here when pair is nil).
func command(ctx context.Context, pair *netns.Pair, idx int, name string, args ...string) *exec.Cmd {
	if pair != nil {
		c := pair.Command(idx, name, args...)
		return exec.CommandContext(ctx, c.Path, c.Args[1:]...)
	}
	return exec.CommandContext(ctx, name, args...)
}
