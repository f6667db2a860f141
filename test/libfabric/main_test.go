package libfabric

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/iwarpd/iwarpd/test/daemontest"
	"github.com/iwarpd/iwarpd/test/netns"
)

// Port blocks of this package (doc.go).
var (
	udBlocks = daemontest.Blocks{Base: 27800, Size: 25, Count: 4}
	rdBlocks = daemontest.Blocks{Base: 27900, Size: 25, Count: 4}
)

const (
	ctrlPortLo  = 28000
	ctrlPortCnt = 100
)

var (
	nextCtrl atomic.Int32
	provDir  string // holds libiwarpd-fi.so ("" when it could not be built: skipWhy says why)
	skipWhy  string
	buildErr string
)

// ports returns the next private UD and RD port blocks, "first-last".
func ports() (ud, rd string) { return udBlocks.Next(), rdBlocks.Next() }

// ctrlPort is the next TCP port for an fi_pingpong control connection.
func ctrlPort() int { return ctrlPortLo + int(nextCtrl.Add(1)-1)%ctrlPortCnt }

func TestMain(m *testing.M) {
	os.Exit(daemontest.Main(m, func(dir string) { progDir = dir; buildProvider() }))
}

func buildProvider() {
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
	dir, err := daemontest.SharedC("", "prov")
	if err != nil {
		buildErr = fmt.Sprintf("make -C c prov: %v", err)
		return
	}
	provDir = dir
}

// progDir is TestMain's temporary directory, for programs the tests
// compile themselves.
var progDir string

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
