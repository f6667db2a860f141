package ofverbs_test

import (
	"os"
	"syscall"
	"testing"

	"github.com/iwarpd/iwarpd/ofverbs"
	"github.com/iwarpd/iwarpd/test/daemontest"
)

// The UD port blocks of this package's daemons: 27000-27099.
var udBlocks = daemontest.Blocks{Base: 27000, Size: 10, Count: 10}

// TestMain builds the programs (test/daemontest.Main) and hands
// daemontest.Start to the package's own end-to-end tests (daemon_test.go),
// which cannot import test/daemontest themselves.
func TestMain(m *testing.M) {
	ofverbs.StartDaemonForTest = func(t *testing.T, extra ...string) (string, string, func(syscall.Signal)) {
		t.Helper()
		ports := udBlocks.Next()
		d := daemontest.Start(t, "iwarpd-"+ports, daemontest.Options{Ports: ports,
			Extra: append([]string{"-log-level", "debug"}, extra...)})
		return d.Sock, d.Ports, func(sig syscall.Signal) { d.Signal(t, sig) }
	}
	os.Exit(daemontest.Main(m, nil))
}
