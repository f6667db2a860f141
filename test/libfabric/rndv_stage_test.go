package libfabric

import (
	"context"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/iwarpd/iwarpd/test/daemontest"
	"github.com/iwarpd/iwarpd/test/netns"
)

// TestRendezvousStaged runs c/prov/tests/fi_rndv_stage.c: 1 MiB
// rendezvous sends both ways at once (window 4 each way) between two RDM
// endpoints of one domain, from and into buffers the application never
// registered, every word checked.
//
//   - staged: with the default staging every send is copied into it —
//     no registration but the staging's own at its first use, no
//     registration-cache use (the program checks) —
//     and the daemon reads no octet of the process's memory
//     (process_mem_read_bytes 0 per octet sent, where the registration
//     cache made it 1: a pread of /proc/PID/mem on the copier);
//   - capped: with 4 MiB of staging the sends copy into 2 MiB at most and
//     the rest go zero copy (cache used, the daemon reads process memory),
//     and both directions complete: the Reads into staging always find
//     the half the sends leave.
//   - loss: staged again, in a network namespace dropping 5 % of the
//     packets (nftables, as cmd/iwarp-bench): every word arrives.
func TestRendezvousStaged(t *testing.T) {
	needProvider(t)
	bin := buildProvProgram(t, "fi_rndv_stage")
	const n, window = 24, "4"
	t.Run("staged", func(t *testing.T) {
		d := daemon(t, "rndv-staged", daemontest.Options{})
		runRndv(t, d, nil, bin, fmt.Sprint(n), window, "staged")
		if got := udCounters(t, d)["process_mem_read_bytes"]; got != 0 {
			t.Errorf("the daemon read %d octets of process memory for %d octets sent, want 0", got, 2*n<<20)
		}
		d.CheckAlive(t)
	})
	t.Run("capped", func(t *testing.T) {
		d := daemon(t, "rndv-capped", daemontest.Options{})
		runRndv(t, d, nil, bin, fmt.Sprint(n), window, "capped", "FI_IWARPD_STAGING=4194304")
		if got := udCounters(t, d)["process_mem_read_bytes"]; got == 0 || got > 2*n<<20 {
			t.Errorf("the daemon read %d octets of process memory, want some (sends past half the staging), "+
				"at most the %d sent", got, 2*n<<20)
		}
		d.CheckAlive(t)
	})
	t.Run("loss", func(t *testing.T) {
		if ok, why := netns.Available(); !ok {
			t.Skip("no network namespaces: " + why)
		}
		const prefix = "iwrs"
		if err := netns.RemoveStale(prefix); err != nil {
			t.Logf("removing stale namespaces: %v", err)
		}
		addrs := [2]netip.Prefix{netip.MustParsePrefix("169.254.89.1/24"), netip.MustParsePrefix("169.254.89.2/24")}
		pair, err := netns.NewPair(fmt.Sprintf("%s%d", prefix, os.Getpid()), addrs, 1500)
		if err != nil {
			t.Skip("no network namespaces: ", err)
		}
		t.Cleanup(func() {
			if err := pair.Close(); err != nil {
				t.Errorf("deleting the namespaces: %v", err)
			}
		})
		if err := setLoss(pair, 5); err != nil {
			t.Skip("no nftables loss: ", err)
		}
		d := daemon(t, "rndv-loss", daemontest.Options{NS: pair, NSIdx: 0, Addr: addrs[0].Addr().String()})
		runRndv(t, d, pair, bin, fmt.Sprint(n), window, "staged")
		c := udCounters(t, d)
		if c["process_mem_read_bytes"] != 0 {
			t.Errorf("the daemon read %d octets of process memory, want 0", c["process_mem_read_bytes"])
		}
		// Both endpoints are on this daemon: what it sent and did not
		// receive was dropped, and RD sent it again.
		if c["datagrams_in"] >= c["datagrams_out"] {
			t.Errorf("no loss seen: %d datagrams sent, %d received", c["datagrams_out"], c["datagrams_in"])
		}
		t.Logf("%d datagrams sent, %d received", c["datagrams_out"], c["datagrams_in"])
		d.CheckAlive(t)
	})
}

// runRndv runs fi_rndv_stage against d (inside namespace 0 of pair, if
// given) with args and extra environment; it must print "ok".
func runRndv(t *testing.T, d *daemontest.Daemon, pair *netns.Pair, bin string, args ...string) {
	t.Helper()
	var env []string
	for len(args) > 0 && strings.Contains(args[len(args)-1], "=") {
		env = append(env, args[len(args)-1])
		args = args[:len(args)-1]
	}
	// A bound against a hang only.
	ctx, cancel := context.WithTimeout(context.Background(), daemontest.Scaled(3*time.Minute))
	defer cancel()
	all := append([]string{"iwarpd"}, args...)
	cmd := exec.CommandContext(ctx, bin, all...)
	if pair != nil {
		cmd = exec.CommandContext(ctx, "ip", append([]string{"netns", "exec", pair.Names[0], bin}, all...)...)
	}
	cmd.Env = fiEnv(d, append(append([]string{"ASAN_OPTIONS=detect_leaks=0"}, native...), env...)...)
	out, err := cmd.CombinedOutput()
	if err != nil || !strings.Contains(string(out), "fi_rndv_stage: ok") {
		t.Fatalf("fi_rndv_stage %v: %v\n%s", args, err, out)
	}
	t.Log(strings.TrimSpace(string(out)))
}
