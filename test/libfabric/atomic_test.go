package libfabric

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/iwarpd/iwarpd/test/daemontest"
	"github.com/iwarpd/iwarpd/test/netns"
)

// Ports of the atomics tests (private to them, doc.go): daemon i (0, 1)
// takes UD 24000+25i.. and RD 24050+25i..; the tests run one after the
// other, so the blocks are reused.
const (
	atomUDBase = 24000
	atomRDBase = 24050
	atomBlock  = 25
)

const (
	atomClients   = 3   // two on the far daemon, one beside the server
	atomFetchAdds = 100 // per client
	atomLockRound = 10  // per client
	atomLocalAdds = 500 // the server's own CPU atomics (t_fi_atomic.c LOCAL_ADDS)
)

func atomDaemon(t *testing.T, name string, idx int, o daemontest.Options) *daemontest.Daemon {
	t.Helper()
	u, r := atomUDBase+idx*atomBlock, atomRDBase+idx*atomBlock
	o.Ports = fmt.Sprintf("%d-%d", u, u+atomBlock-1)
	o.Extra = append(o.Extra, "-rd-ports", fmt.Sprintf("%d-%d", r, r+atomBlock-1))
	return daemontest.Start(t, name, o)
}

func atomSanEnv() []string {
	return []string{"ASAN_OPTIONS=detect_leaks=1:abort_on_error=0", "UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1"}
}

func checkSan(t *testing.T, who, out string) {
	t.Helper()
	if strings.Contains(out, "Sanitizer") || strings.Contains(out, "runtime error") {
		t.Errorf("%s: sanitizer report:\n%s", who, out)
	}
}

// runAtomics runs t_fi_atomic: a server on da (namespace 0) and
// atomClients clients, the first beside it, the others on db (namespace 1).
func runAtomics(t *testing.T, pair *netns.Pair, da, db *daemontest.Daemon, ep string) {
	t.Helper()
	bin := filepath.Join(provDir, "prov", "t_fi_atomic")
	timeout := daemontest.Scaled(180 * time.Second)
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	// FI_LOG_LEVEL=warn: a close whose linger ran out says so (iwd_ep_base.c
	// ep_linger), and a failure shows it with the clients' output.
	env := append(append(atomSanEnv(), native...), "FI_LOG_LEVEL=info", "FI_LOG_PROV=iwarpd")
	scale := "IWARPD_TEST_TIMEOUT_SCALE=" + os.Getenv("IWARPD_TEST_TIMEOUT_SCALE")

	srv := command(ctx, pair, 0, bin, "server", ep, strconv.Itoa(atomClients), strconv.Itoa(atomFetchAdds),
		strconv.Itoa(atomLockRound))
	srv.Env = append(fiEnv(da, env...), scale)
	stdout, err := srv.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var srvErr strings.Builder
	srv.Stderr = &srvErr
	if err := srv.Start(); err != nil {
		t.Fatal(err)
	}
	lines := make(chan string, 64)
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			lines <- sc.Text()
		}
		io.Copy(io.Discard, stdout)
		close(lines)
	}()
	var srvOut []string
	var ready []string
	for ready == nil {
		select {
		case l, ok := <-lines:
			if !ok {
				srv.Wait()
				t.Fatalf("server exited before READY:\n%s\n%s", strings.Join(srvOut, "\n"), srvErr.String())
			}
			srvOut = append(srvOut, l)
			if f := strings.Fields(l); len(f) == 4 && f[0] == "READY" {
				ready = f[1:]
			}
		case <-ctx.Done():
			srv.Process.Kill()
			srv.Wait()
			t.Fatalf("server not READY within %v:\n%s", timeout, srvErr.String())
		}
	}

	type result struct {
		out string
		err error
	}
	results := make(chan result, atomClients)
	for i := 0; i < atomClients; i++ {
		idx, d := 1, db
		if i == 0 {
			idx, d = 0, da
		}
		cli := command(ctx, pair, idx, bin, "client", ep, ready[0], ready[1], ready[2], strconv.Itoa(i),
			strconv.Itoa(atomFetchAdds), strconv.Itoa(atomLockRound))
		cli.Env = append(fiEnv(d, env...), scale)
		go func() {
			out, err := run(t, cli, timeout)
			results <- result{out, err}
		}()
	}
	seen := map[uint64]bool{}
	var cliOut []string
	for i := 0; i < atomClients; i++ {
		r := <-results
		cliOut = append(cliOut, r.out)
		checkSan(t, "client", r.out)
		if r.err != nil || !strings.Contains(r.out, "CLIENT OK") {
			t.Errorf("client: %v\n%s", r.err, r.out)
			continue
		}
		for _, l := range strings.Split(r.out, "\n") {
			f := strings.Fields(l)
			if len(f) > 0 && f[0] == "LATENCY" {
				t.Logf("client: %s", l) // information only: the clients run at once
			}
			if len(f) == 0 || f[0] != "FETCH" {
				continue
			}
			if len(f)-1 != atomFetchAdds {
				t.Errorf("client printed %d fetch results, want %d", len(f)-1, atomFetchAdds)
			}
			for _, s := range f[1:] {
				v, err := strconv.ParseUint(s, 10, 64)
				if err != nil {
					t.Fatalf("fetch result %q: %v", s, err)
				}
				if seen[v] {
					t.Errorf("fetch result %d returned twice: a FetchAdd ran twice or was not atomic", v)
				}
				seen[v] = true
				if v >= atomClients*atomFetchAdds+atomLocalAdds {
					t.Errorf("fetch result %d beyond every increment", v)
				}
			}
		}
	}
	if len(seen) != atomClients*atomFetchAdds && !t.Failed() {
		t.Errorf("%d unique fetch results, want %d", len(seen), atomClients*atomFetchAdds)
	}
	// The server finishes at once after the last client's "done": one
	// still waiting a while later is stuck (it gives up itself, naming
	// what did not come, at its own deadline). The daemons are asked what
	// they hold while its QP still exists.
	diagnosed := false
	stuck := time.NewTimer(daemontest.Scaled(15 * time.Second))
	defer stuck.Stop()
	for open := true; open; {
		select {
		case l, ok := <-lines:
			if !ok {
				open = false
				break
			}
			srvOut = append(srvOut, l)
		case <-stuck.C:
			t.Logf("the server is still running 15 s after the last client finished: what the daemons hold")
			atomDiagnose(t, cliOut, da, db)
			diagnosed = true
		}
	}
	serr := srv.Wait()
	all := strings.Join(srvOut, "\n") + "\n" + srvErr.String()
	checkSan(t, "server", all)
	if serr != nil || !strings.Contains(all, "SERVER OK") {
		if !diagnosed {
			atomDiagnose(t, cliOut, da, db)
		}
		t.Fatalf("server: %v\n%s", serr, all)
	}
	want := fmt.Sprintf("COUNTER %d ", atomClients*atomFetchAdds+atomLocalAdds)
	if !strings.Contains(all, want) {
		t.Errorf("server output lacks %q:\n%s", want, all)
	}
	t.Logf("%s", strings.TrimSpace(strings.Join(srvOut, "\n"))) // its standard error is the provider's log (info)
}

// atomDiagnose logs what explains a server that did not finish: every
// client's output (the provider's warnings, among them a close whose
// linger ran out with the rank's sends unacknowledged) and both daemons'
// counters (docs/iwarpctl.md "counters").
func atomDiagnose(t *testing.T, cliOut []string, daemons ...*daemontest.Daemon) {
	t.Helper()
	for i, out := range cliOut {
		t.Logf("client (finished %d of %d) output:\n%s", i+1, len(cliOut), out)
	}
	for _, d := range daemons {
		c := udCounters(t, d)
		names := make([]string, 0, len(c))
		for n, v := range c {
			if v != 0 {
				names = append(names, fmt.Sprintf("%s=%d", n, v))
			}
		}
		sort.Strings(names)
		t.Logf("daemon %s counters (non-zero): %s", d.Name, strings.Join(names, " "))
		ctx, cancel := context.WithTimeout(context.Background(), daemontest.Scaled(15*time.Second))
		cmd := exec.CommandContext(ctx, daemontest.Bins["iwarpctl"], "-socket", d.Sock, "qps")
		cmd.Env = daemontest.CleanEnv()
		out, err := cmd.CombinedOutput()
		cancel()
		t.Logf("daemon %s QPs (iwarpctl qps): %v\n%s", d.Name, err, out)
	}
}

// TestAtomicsLoopback: FI_ATOMIC and FI_REMOTE_CQ_DATA over RDM (RD) and
// MSG (RC) between two loopback daemons, three client processes on one
// heap counter the server also adds to with CPU atomics.
func TestAtomicsLoopback(t *testing.T) {
	needProvider(t)
	da := atomDaemon(t, "at-a", 0, daemontest.Options{})
	db := atomDaemon(t, "at-b", 1, daemontest.Options{})
	for _, ep := range []string{"rdm", "msg"} {
		t.Run(ep, func(t *testing.T) {
			runAtomics(t, nil, da, db, ep)
			da.CheckAlive(t)
			db.CheckAlive(t)
		})
	}
}

// TestAtomicsNetns: the same across two network namespaces (veth, MTU 1500),
// then RDM again with 5 % packet loss (nftables) in both namespaces.
func TestAtomicsNetns(t *testing.T) {
	needProvider(t)
	if ok, why := netns.Available(); !ok {
		t.Skip("skipping the network-namespace test: " + why)
	}
	const prefix = "iwat"
	if err := netns.RemoveStale(prefix); err != nil {
		t.Logf("removing stale namespaces: %v", err)
	}
	addrs := [2]netip.Prefix{netip.MustParsePrefix("169.254.87.1/24"), netip.MustParsePrefix("169.254.87.2/24")}
	pair, err := netns.NewPair(fmt.Sprintf("%s%d", prefix, os.Getpid()), addrs, 1500)
	if err != nil {
		t.Skip("skipping the network-namespace test: ", err)
	}
	t.Cleanup(func() {
		if err := pair.Close(); err != nil {
			t.Errorf("deleting the namespaces: %v", err)
		}
	})
	da := atomDaemon(t, "at-ns-a", 0, daemontest.Options{NS: pair, NSIdx: 0, Addr: addrs[0].Addr().String()})
	db := atomDaemon(t, "at-ns-b", 1, daemontest.Options{NS: pair, NSIdx: 1, Addr: addrs[1].Addr().String()})
	for _, ep := range []string{"rdm", "msg"} {
		t.Run(ep, func(t *testing.T) {
			runAtomics(t, pair, da, db, ep)
		})
	}
	// RD retransmits lost Atomic Requests and Responses: still exactly once.
	t.Run("rdm-loss5", func(t *testing.T) {
		if err := setLoss(pair, 5); err != nil {
			t.Skip("no nftables loss: ", err)
		}
		runAtomics(t, pair, da, db, "rdm")
	})
}

// setLoss makes each namespace of p drop pct % of the TCP and UDP packets
// it receives (nftables input hook, numgen random), one wire packet at a
// time (gso_max_segs 1 on both veth ends), as cmd/iwarp-bench does.
func setLoss(p *netns.Pair, pct int) error {
	for i, ns := range p.Names {
		for _, args := range [][]string{
			{"-n", ns, "link", "set", p.Links[i], "gso_max_segs", "1"},
			{"netns", "exec", ns, "nft", "add", "table", "inet", "iwarp_fiatomic"},
			{"netns", "exec", ns, "nft", "add", "chain", "inet", "iwarp_fiatomic", "in",
				"{ type filter hook input priority 0 ; }"},
			{"netns", "exec", ns, "nft", "add", "rule", "inet", "iwarp_fiatomic", "in", "meta", "l4proto", "{", "tcp",
				",", "udp", "}", "numgen", "random", "mod", "100", "<", fmt.Sprint(pct), "drop"},
		} {
			if out, err := exec.Command("ip", args...).CombinedOutput(); err != nil {
				return fmt.Errorf("ip %s: %v: %s", strings.Join(args, " "), err, out)
			}
		}
	}
	return nil
}

// TestAdoptStale runs c/prov/tests/fi_adopt_stale.c: an atomic target's
// pages (adopted into a memfd) are unmapped while their MR lives and new
// memory is mapped at the same address, as Open MPI's registration cache
// lets it happen. A new MR there must be the new memory (an fi_write and a
// fetch-add land where the application looks), closing the old MR must not
// put the old contents back over the new memory, and closing the new one
// gives its pages back intact.
func TestAdoptStale(t *testing.T) {
	runProvProgram(t, "fi_adopt_stale")
}
