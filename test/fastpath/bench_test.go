package fastpath

import (
	"os"
	"strings"
	"testing"
)

// TestBenchFigures logs, with IWARPD_FASTPATH_BENCH=1, the nanoseconds
// per encode+CRC (headers, CRC32c over headers and payload, iovec) and
// per parse+CRC+classify of an 8 B RD Send, and per parse of the UD one,
// from t_fastpath built with -O2 (no sanitizer). Figures only: nothing
// about time is asserted. Run it under the test lock (a benchmark).
func TestBenchFigures(t *testing.T) {
	if os.Getenv("IWARPD_FASTPATH_BENCH") == "" {
		t.Skip("set IWARPD_FASTPATH_BENCH=1 to measure the codec")
	}
	p := start(t, buildProgram(t, t.TempDir(), "-O2", "-g"))
	for range 3 {
		got := p.ask("bench 5000000")
		if !strings.Contains(got, "sends 10000000 of 10000000") {
			t.Fatalf("bench: %s", got)
		}
		t.Log(got)
	}
}
