package hostile

import (
	"fmt"
	"os"
	"sync/atomic"

	"testing"

	"github.com/iwarpd/iwarpd/test/daemontest"
)

// helperEnv selects a hostile helper mode of the test binary instead of
// running the tests (see the helper files for the modes).
const helperEnv = "IWARPD_HOSTILE_HELPER"

// helpers maps a helper mode to its function; files register theirs in init.
var helpers = map[string]func() int{}

func TestMain(m *testing.M) {
	if mode := os.Getenv(helperEnv); mode != "" {
		f, ok := helpers[mode]
		if !ok {
			fmt.Fprintf(os.Stderr, "hostile: unknown helper mode %q\n", mode)
			os.Exit(2)
		}
		os.Exit(f())
	}
	dir, err := os.MkdirTemp("", "iwarpd-hostile-")
	if err != nil {
		fmt.Fprintln(os.Stderr, "hostile:", err)
		os.Exit(1)
	}
	code := 1
	if err := daemontest.Build(dir); err != nil {
		fmt.Fprintln(os.Stderr, "hostile:", err)
	} else {
		code = m.Run()
	}
	os.RemoveAll(dir)
	os.Exit(code)
}

// UD port blocks of 50 inside 27000-27499, handed out in turn.
const (
	portBase   = 27000
	portBlock  = 50
	portBlocks = 10
)

var nextBlock atomic.Int32

// nextPorts returns the next private UD port block, "first-last".
func nextPorts() string {
	b := int(nextBlock.Add(1)-1) % portBlocks
	first := portBase + b*portBlock
	return fmt.Sprintf("%d-%d", first, first+portBlock-1)
}

// TestSmoke: the suite's daemon starts and a well-behaved client opens a
// session.
func TestSmoke(t *testing.T) {
	d := daemontest.Start(t, "smoke", daemontest.Options{Ports: nextPorts()})
	c := d.Open(t, "smoke")
	if _, err := c.QueryDevice(); err != nil {
		t.Fatal(err)
	}
}
