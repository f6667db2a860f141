package testwait

import (
	"os"
	"strconv"
	"time"
)

// Env is the environment variable holding the factor.
const Env = "IWARPD_TEST_TIMEOUT_SCALE"

// Scaled multiplies d by IWARPD_TEST_TIMEOUT_SCALE (default 1; a value that
// is not a positive number counts as 1).
func Scaled(d time.Duration) time.Duration {
	if f, err := strconv.ParseFloat(os.Getenv(Env), 64); err == nil && f > 0 {
		return time.Duration(float64(d) * f)
	}
	return d
}
