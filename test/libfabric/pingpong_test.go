package libfabric

import (
	"context"
	"fmt"
	"net/netip"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/iwarpd/iwarpd/test/daemontest"
	"github.com/iwarpd/iwarpd/test/netns"
)

// A fi_pingpong configuration: provider, endpoint type, sizes (-S), the
// largest size it must reach, and environment for the provider stack.
type ppCase struct {
	name    string
	prov    string
	ep      string
	sizes   []string // one run per entry
	largest string   // the size column of the last line of the "all" run
	env     []string
	// known names a failure seen on main and not yet fixed (issue 10 is
	// open on it): the case is skipped with this text unless
	// IWARPD_FI_KNOWN=1, so that it stays visible and runnable.
	known string
}

// native selects the iwarpd provider itself, not a utility provider
// layered on it (fi_pingpong takes the first info).
var native = []string{"FI_PROVIDER=^ofi_rxm,ofi_rxd"}

func ppCases() []ppCase {
	return []ppCase{
		// The rdm cases failed at teardown with "transport retry counter
		// exceeded" (issue 10) while the daemon let a destroyed RD QP's
		// delayed ACK die with it; it sends the ACKs it owes at destroy now
		// (verbsd TestRDDestroyedReceiverAcks).
		{name: "rdm", prov: "iwarpd", ep: "rdm", sizes: []string{"all"}, largest: "6m", env: native},
		{name: "rdm-progress-thread", prov: "iwarpd", ep: "rdm", sizes: []string{"all"}, largest: "6m",
			env: append([]string{"FI_IWARPD_PROGRESS_THREAD=1"}, native...)},
		{name: "rdm-eager-4k", prov: "iwarpd", ep: "rdm", sizes: []string{"all"}, largest: "6m",
			env: append([]string{"FI_IWARPD_EAGER_MAX=4096"}, native...)},
		{name: "dgram", prov: "iwarpd", ep: "dgram", sizes: []string{"all"}, largest: "64k", env: native},
		{name: "msg", prov: "iwarpd", ep: "msg", sizes: []string{"all"}, largest: "6m", env: native},
		{name: "rxd", prov: "iwarpd;ofi_rxd", ep: "rdm", sizes: []string{"all"}, largest: "6m",
			known: "across namespaces the server stalled until the 120 s timeout (1 run in 3 on the merged main): ofi_rxd (libfabric 1.17) does not recover from some lost datagrams — libfabric's own udp;ofi_rxd stalls the same way at 1 % loss (2 runs in 4), iwarpd;ofi_rxd 3 in 6 — and the DGRAM endpoint drops datagrams when rxd has not reposted its receives in time (drop_no_recv)"},
		// ofi_rxm with its defaults: eager up to 16 KiB, segmentation (SAR)
		// up to 128 KiB, above that rendezvous with an RMA Read of the
		// sender's registration of application memory (docs/libfabric.md):
		// each protocol at and beyond its edge, to 1 MiB. It hung when
		// RxM read FI_SHUTDOWN before the peer's last message and closed
		// the connection's endpoint, discarding it (issue 10); FI_SHUTDOWN
		// now comes after the completions before it (TestShutdownAfterCompletions).
		{name: "rxm", prov: "iwarpd;ofi_rxm", ep: "rdm", sizes: []string{"1", "16384", "16385", "131072", "131073", "1048576"}},
	}
}

// pingpong runs one fi_pingpong server/client pair and checks that every
// size line reports all its messages acknowledged.
func pingpong(t *testing.T, pair *netns.Pair, da, db *daemontest.Daemon, serverIP string, c ppCase, size string) string {
	t.Helper()
	timeout := daemontest.Scaled(120 * time.Second)
	var clientOut string
	for attempt := 0; attempt < 20; attempt++ {
		port := fmt.Sprint(ctrlPort())
		ctx, cancel := context.WithTimeout(context.Background(), timeout)
		args := []string{"-p", c.prov, "-e", c.ep, "-c", "-I", "10", "-S", size}
		srv := command(ctx, pair, 0, "fi_pingpong", append(args, "-B", port)...)
		srv.Env = fiEnv(da, c.env...)
		var srvOut strings.Builder
		srv.Stdout, srv.Stderr = &srvOut, &srvOut
		if err := srv.Start(); err != nil {
			cancel()
			t.Fatal(err)
		}
		srvDone := make(chan error, 1)
		go func() { srvDone <- srv.Wait() }()
		cli := command(ctx, pair, 1, "fi_pingpong", append(args, "-P", port, serverIP)...)
		cli.Env = fiEnv(db, c.env...)
		out, err := run(t, cli, timeout)
		if strings.Contains(out, "failed to connect") {
			// The server was not listening yet: try again, bounded.
			srv.Process.Kill()
			<-srvDone
			cancel()
			time.Sleep(100 * time.Millisecond)
			continue
		}
		var serr error
		select {
		case serr = <-srvDone:
		case <-time.After(timeout):
			srv.Process.Kill()
			serr = <-srvDone
		}
		cancel()
		if err != nil || serr != nil {
			t.Fatalf("fi_pingpong %s -S %s: client: %v, server: %v\nclient:\n%s\nserver:\n%s", c.name, size, err, serr,
				out, srvOut.String())
		}
		clientOut = out
		break
	}
	if clientOut == "" {
		t.Fatalf("fi_pingpong %s: the server never listened", c.name)
	}
	lines := 0
	last := ""
	for _, line := range strings.Split(clientOut, "\n") {
		f := strings.Fields(line)
		if len(f) < 3 || f[0] == "bytes" {
			continue
		}
		lines++
		last = f[0]
		if f[2] != "="+f[1] {
			t.Errorf("fi_pingpong %s size %s: %s sent, %s acknowledged", c.name, f[0], f[1], f[2])
		}
	}
	if lines == 0 {
		t.Fatalf("fi_pingpong %s -S %s printed no results:\n%s", c.name, size, clientOut)
	}
	if size == "all" && c.largest != "" && last != c.largest {
		t.Errorf("fi_pingpong %s -S all ended at %s, want %s:\n%s", c.name, last, c.largest, clientOut)
	}
	return clientOut
}

// TestPingpongLoopback is acceptance point 2 on loopback: two daemons,
// fi_pingpong -c for rdm, dgram and msg and both layered providers.
func TestPingpongLoopback(t *testing.T) {
	needProvider(t)
	da := daemon(t, "a", daemontest.Options{})
	db := daemon(t, "b", daemontest.Options{})
	for _, c := range ppCases() {
		t.Run(c.name, func(t *testing.T) {
			skipKnown(t, c)
			for _, s := range c.sizes {
				pingpong(t, nil, da, db, "127.0.0.1", c, s)
			}
			da.CheckAlive(t)
			db.CheckAlive(t)
		})
	}
}

// TestPingpongNetns is acceptance point 2 across two network namespaces
// joined by a veth pair (MTU 1500): a daemon and a fi_pingpong in each.
func TestPingpongNetns(t *testing.T) {
	needProvider(t)
	if ok, why := netns.Available(); !ok {
		t.Skip("skipping the network-namespace test: " + why)
	}
	const prefix = "iwfi"
	if err := netns.RemoveStale(prefix); err != nil {
		t.Logf("removing stale namespaces: %v", err)
	}
	addrs := [2]netip.Prefix{netip.MustParsePrefix("169.254.85.1/24"), netip.MustParsePrefix("169.254.85.2/24")}
	pair, err := netns.NewPair(fmt.Sprintf("%s%d", prefix, os.Getpid()), addrs, 1500)
	if err != nil {
		t.Skip("skipping the network-namespace test: ", err)
	}
	t.Cleanup(func() {
		if err := pair.Close(); err != nil {
			t.Errorf("deleting the namespaces: %v", err)
		}
	})
	da := daemon(t, "ns-a", daemontest.Options{NS: pair, NSIdx: 0, Addr: addrs[0].Addr().String()})
	db := daemon(t, "ns-b", daemontest.Options{NS: pair, NSIdx: 1, Addr: addrs[1].Addr().String()})
	for _, c := range ppCases() {
		t.Run(c.name, func(t *testing.T) {
			skipKnown(t, c)
			for _, s := range c.sizes {
				pingpong(t, pair, da, db, addrs[0].Addr().String(), c, s)
			}
		})
	}
}

// skipKnown skips a case with a known failure unless IWARPD_FI_KNOWN=1.
func skipKnown(t *testing.T, c ppCase) {
	t.Helper()
	if c.known != "" && os.Getenv("IWARPD_FI_KNOWN") != "1" {
		t.Skipf("KNOWN FAILURE (issue 10, IWARPD_FI_KNOWN=1 runs it): %s", c.known)
	}
}
