package libfabric

import (
	"context"
	"encoding/json"
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

// A fi_pingpong configuration: provider, endpoint type, sizes (-S), the
// largest size it must reach, and environment for the provider stack.
type ppCase struct {
	name    string
	prov    string
	ep      string
	sizes   []string // one run per entry
	largest string   // the size column of the last line of the "all" run
	env     []string
	iters   string // fi_pingpong -I (default 10)
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
		// The rxd case stalled ~1 run in 35 across namespaces (issue 10):
		// the DGRAM endpoint dropped the datagrams rxd retransmits faster
		// than it reposts (drop_no_recv; now they wait in the daemon's UD
		// socket, docs/iwarpd.md "UD receive backlog"), and fi_close
		// destroyed the UD QP with rxd's last ACK not yet sent (the DGRAM
		// endpoint lingers until its sends completed, docs/libfabric.md).
		{name: "rxd", prov: "iwarpd;ofi_rxd", ep: "rdm", sizes: []string{"all"}, largest: "6m"},
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
	dgram := c.ep == "dgram" || strings.Contains(c.prov, "ofi_rxd") // runs on UD QPs
	var before [2]map[string]int64
	if dgram {
		before = [2]map[string]int64{udCounters(t, da), udCounters(t, db)}
	}
	// udDrops says what the daemons' UD receive paths counted in this run.
	udDrops := func() string {
		if !dgram {
			return ""
		}
		var b strings.Builder
		for i, d := range []*daemontest.Daemon{da, db} {
			after := udCounters(t, d)
			fmt.Fprintf(&b, "daemon %s:", d.Name)
			for _, k := range udCounterNames {
				fmt.Fprintf(&b, " %s %d", k, after[k]-before[i][k])
			}
			b.WriteString("; ")
		}
		return b.String()
	}
	var clientOut string
	for attempt := 0; attempt < 20; attempt++ {
		port := fmt.Sprint(ctrlPort())
		ctx, cancel := context.WithTimeout(context.Background(), timeout)
		iters := c.iters
		if iters == "" {
			iters = "10"
		}
		args := []string{"-p", c.prov, "-e", c.ep, "-c", "-I", iters, "-S", size}
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
			t.Fatalf("fi_pingpong %s -S %s: client: %v, server: %v\n%s\nclient:\n%s\nserver:\n%s", c.name, size, err, serr,
				udDrops(), out, srvOut.String())
		}
		clientOut = out
		break
	}
	if clientOut == "" {
		t.Fatalf("fi_pingpong %s: the server never listened", c.name)
	}
	if dgram {
		t.Logf("fi_pingpong %s -S %s: %s", c.name, size, udDrops())
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

// udCounterNames are the daemon counters of the UD receive path a
// DGRAM-based run logs (docs/iwarpd.md "UD receive backlog").
var udCounterNames = []string{"datagrams_in", "drop_no_recv", "drop_socket_full", "recv_parked", "recv_held"}

// udCounters reads daemon d's counters with iwarpctl (nil, logged, if it
// cannot: they only explain a run).
func udCounters(t *testing.T, d *daemontest.Daemon) map[string]int64 {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), daemontest.Scaled(15*time.Second))
	defer cancel()
	cmd := exec.CommandContext(ctx, daemontest.Bins["iwarpctl"], "-socket", d.Sock, "-json", "counters")
	cmd.Env = daemontest.CleanEnv()
	out, err := cmd.Output()
	c := map[string]int64{}
	if err == nil {
		err = json.Unmarshal(out, &c)
	}
	if err != nil {
		t.Logf("iwarpctl counters of %s: %v", d.Name, err)
	}
	return c
}
