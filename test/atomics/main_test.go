package atomics

import (
	"os"
	"testing"

	"github.com/iwarpd/iwarpd/test/daemontest"
)

func TestMain(m *testing.M) { os.Exit(daemontest.Main(m, nil)) }

// Private port blocks (doc.go): UD 25000-25399, RD 25400-25599; RC
// listeners take port 0 (the daemon picks an ephemeral port).
var (
	udBlocks = daemontest.Blocks{Base: 25000, Size: 50, Count: 8}
	rdBlocks = daemontest.Blocks{Base: 25400, Size: 25, Count: 8}
)

// startDaemon starts a daemon (daemontest.Start) on private UD and RD port
// blocks (o.Extra after them).
func startDaemon(t *testing.T, name string, o daemontest.Options) *daemontest.Daemon {
	t.Helper()
	o.Ports = udBlocks.Next()
	o.Extra = append([]string{"-rd-ports", rdBlocks.Next()}, o.Extra...)
	return daemontest.Start(t, name, o)
}
