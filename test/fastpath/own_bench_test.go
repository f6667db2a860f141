package fastpath

import (
	"os"
	"os/exec"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/iwarpd/iwarpd/internal/pinfork"
	"github.com/iwarpd/iwarpd/ofverbs"
	"github.com/iwarpd/iwarpd/test/daemontest"
)

// TestOwnLeaseFigures logs, with IWARPD_FASTPATH_BENCH=1, how often a
// rank that polls all the time loses its socket to the engine's take-over
// (its lease not renewed within -fastpath-lease because the machine kept
// it off the CPU) for a few leases, quiet and with two busy processes
// beside (the loaded case): t_fpown receives 3000 Sends without
// pausing, so every take-over is one the load caused. Figures only:
// nothing about time is asserted. Run it under the test lock.
func TestOwnLeaseFigures(t *testing.T) {
	if os.Getenv("IWARPD_FASTPATH_BENCH") == "" {
		t.Skip("set IWARPD_FASTPATH_BENCH=1 to measure take-overs under load")
	}
	const n = 3000
	for _, loaded := range []bool{false, true} {
		for _, lease := range []string{"1ms", "4ms", "16ms"} {
			var hogs []*exec.Cmd
			if loaded {
				for range 2 {
					// Killed below, or by t.Cleanup on a failure, or by the
					// kernel if this process dies (Pdeathsig): a busy loop
					// left behind keeps the test lock's descriptor it
					// inherited, and a CPU. (timeout(1) around sh was not
					// enough: killing timeout left sh running.)
					h := exec.Command("sh", "-c", "while :; do :; done")
					h.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
					if err := pinfork.Start(h); err != nil {
						t.Fatal(err)
					}
					t.Cleanup(func() { h.Process.Kill(); h.Wait() })
					hogs = append(hogs, h)
				}
			}
			extra := []string{"-fastpath-lease", lease}
			a := daemontest.Start(t, "rank", daemontest.Options{Ports: ownBlocks.Next(), Extra: extra})
			b := daemontest.Start(t, "peer", daemontest.Options{Ports: ownBlocks.Next()})
			p := startRank(t, a.Sock, "rank", strconv.Itoa(n), strconv.Itoa(n+1))
			addr, qkey := p.ready()
			e := newLiveEnd(t, "peer", b.Open(t, "peer"), ofverbs.QPTypeUD)
			ah, err := e.pd.CreateAHTo(ofverbs.Endpoint{Addr: addr, QKey: qkey})
			if err != nil {
				t.Fatal(err)
			}
			start := time.Now()
			sendNumbered(t, e, ah, n)
			res := parseResult(t, p.line("result"))
			took := time.Since(start)
			p.line("figures")
			t.Logf("loaded=%v lease=%s: %d Sends in %v (%.1f µs each), %d by the rank, %d through the CQ, %d take-overs, %d hand-backs, dup %d, missing %d",
				loaded, lease, n, took.Round(time.Millisecond), float64(took.Microseconds())/n, res["rank"], res["cq"],
				res["takeovers"], res["handbacks"], res["dup"], res["missing"])
			p.finish()
			a.Stop()
			b.Stop()
			for _, h := range hogs {
				h.Process.Kill()
				h.Wait()
			}
		}
	}
}
