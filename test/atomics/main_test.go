package atomics

import (
	"fmt"
	"os"
	"sync/atomic"
	"testing"

	"github.com/iwarpd/iwarpd/test/daemontest"
)

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "iwarpd-atomics-")
	if err != nil {
		fmt.Fprintln(os.Stderr, "atomics:", err)
		os.Exit(1)
	}
	code := 1
	if err := daemontest.Build(dir); err != nil {
		fmt.Fprintln(os.Stderr, "atomics:", err)
	} else {
		code = m.Run()
	}
	os.RemoveAll(dir)
	os.Exit(code)
}

// Private port blocks (doc.go): UD 25000-25399, RD 25400-25599, RC
// listeners 25600-25799.
const (
	udPortBase  = 25000
	udPortBlock = 50
	udBlocks    = 8
	rdPortBase  = 25400
	rdPortBlock = 25
	rdBlocks    = 8
	rcPortBase  = 25600
	rcPorts     = 200
)

var nextUD, nextRD, nextRC atomic.Int32

// daemonPorts returns the flags of a daemon's private UD and RD port blocks.
func daemonPorts() (ud string, extra []string) {
	b := int(nextUD.Add(1)-1) % udBlocks
	first := udPortBase + b*udPortBlock
	r := int(nextRD.Add(1)-1) % rdBlocks
	rfirst := rdPortBase + r*rdPortBlock
	return fmt.Sprintf("%d-%d", first, first+udPortBlock-1),
		[]string{"-rd-ports", fmt.Sprintf("%d-%d", rfirst, rfirst+rdPortBlock-1)}
}

// rcPort returns the next private RC listener port.
func rcPort() int { return rcPortBase + int(nextRC.Add(1)-1)%rcPorts }

// startDaemon starts a daemon on private ports (extra flags appended).
func startDaemon(t *testing.T, name string, o daemontest.Options) *daemontest.Daemon {
	t.Helper()
	ud, extra := daemonPorts()
	o.Ports = ud
	o.Extra = append(extra, o.Extra...)
	return daemontest.Start(t, name, o)
}
