package verbsdtest

import (
	"os"
	"strconv"
)

// EnginesEnv names the environment variable that runs a test package's
// daemons with that many engines (docs/engines.md): in-process servers of
// verbsd's tests and the iwarpd processes test/daemontest starts.
const EnginesEnv = "IWARPD_TEST_ENGINES"

// Engines is IWARPD_TEST_ENGINES, or 0 (the daemon's default) when it is
// unset or not a positive number.
func Engines() int {
	n, err := strconv.Atoi(os.Getenv(EnginesEnv))
	if err != nil || n < 1 {
		return 0
	}
	return n
}
