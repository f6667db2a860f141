package hostile

import (
	"fmt"
	"os"

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
	os.Exit(daemontest.Main(m, nil))
}

// UD port blocks of 50 inside 27000-27499, handed out in turn.
var udBlocks = daemontest.Blocks{Base: 27000, Size: 50, Count: 10}

// nextPorts returns the next private UD port block, "first-last".
func nextPorts() string { return udBlocks.Next() }

// TestSmoke: the suite's daemon starts and a well-behaved client opens a
// session.
func TestSmoke(t *testing.T) {
	d := daemontest.Start(t, "smoke", daemontest.Options{Ports: nextPorts()})
	c := d.Open(t, "smoke")
	if _, err := c.QueryDevice(); err != nil {
		t.Fatal(err)
	}
}
