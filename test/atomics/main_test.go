package atomics

import (
	"os"
	"sync/atomic"
	"testing"

	"github.com/iwarpd/iwarpd/test/daemontest"
)

func TestMain(m *testing.M) { os.Exit(daemontest.Main(m, nil)) }

// Private port blocks (doc.go): UD 25000-25399, RD 25400-25599, RC
// listeners 25600-25799.
var (
	udBlocks = daemontest.Blocks{Base: 25000, Size: 50, Count: 8}
	rdBlocks = daemontest.Blocks{Base: 25400, Size: 25, Count: 8}
)

const (
	rcPortBase = 25600
	rcPorts    = 200
)

var nextRC atomic.Int32

// rcPort returns the next private RC listener port.
func rcPort() int { return rcPortBase + int(nextRC.Add(1)-1)%rcPorts }

// startDaemon starts a daemon (daemontest.Start) on private UD and RD port
// blocks (o.Extra after them).
func startDaemon(t *testing.T, name string, o daemontest.Options) *daemontest.Daemon {
	t.Helper()
	o.Ports = udBlocks.Next()
	o.Extra = append([]string{"-rd-ports", rdBlocks.Next()}, o.Extra...)
	return daemontest.Start(t, name, o)
}
