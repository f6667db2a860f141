package libfabric

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/iwarpd/iwarpd/test/daemontest"
	"github.com/iwarpd/iwarpd/test/netns"
)

// runMsgData runs t_fi_msgdata (c/prov/tests/t_fi_msgdata.c): the server
// on da (namespace 0), the client on db (namespace 1). The server checks
// that fi_senddata, fi_sendmsg(FI_REMOTE_CQ_DATA), fi_injectdata and
// fi_writedata, mixed with plain sends, each complete exactly one posted
// receive, in order, with the data, the length and the CQ data.
func runMsgData(t *testing.T, pair *netns.Pair, da, db *daemontest.Daemon) {
	t.Helper()
	bin := filepath.Join(provDir, "prov", "t_fi_msgdata")
	timeout := daemontest.Scaled(120 * time.Second)
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	env := append(atomSanEnv(), native...)
	env = append(env, "IWARPD_TEST_TIMEOUT_SCALE="+os.Getenv("IWARPD_TEST_TIMEOUT_SCALE"))
	srv := command(ctx, pair, 0, bin, "server")
	srv.Env = fiEnv(da, env...)
	stdout, err := srv.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var srvErr strings.Builder
	srv.Stderr = &srvErr
	if err := srv.Start(); err != nil {
		t.Fatal(err)
	}
	lines := make(chan string, 16)
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			lines <- sc.Text()
		}
		io.Copy(io.Discard, stdout)
		close(lines)
	}()
	var srvOut, ready []string
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
	cli := command(ctx, pair, 1, bin, "client", ready[0], ready[1], ready[2])
	cli.Env = fiEnv(db, env...)
	out, cerr := run(t, cli, timeout)
	checkSan(t, "client", out)
	if cerr != nil || !strings.Contains(out, "CLIENT OK") {
		t.Errorf("client: %v\n%s", cerr, out)
		srv.Process.Kill()
	}
	for _, l := range strings.Split(out, "\n") {
		if strings.HasPrefix(l, "LATENCY") {
			t.Logf("client: %s", l) // information only
		}
	}
	for l := range lines {
		srvOut = append(srvOut, l)
	}
	serr := srv.Wait()
	all := strings.Join(srvOut, "\n") + "\n" + srvErr.String()
	checkSan(t, "server", all)
	if serr != nil || !strings.Contains(all, "SERVER OK") {
		t.Fatalf("server: %v\n%s", serr, all)
	}
	t.Logf("%s", strings.TrimSpace(all))
}

// TestMsgDataLoopback: remote CQ data on FI_EP_MSG between two loopback
// daemons (docs/libfabric.md "Atomics and remote CQ data").
func TestMsgDataLoopback(t *testing.T) {
	needProvider(t)
	da := daemon(t, "md-a", daemontest.Options{})
	db := daemon(t, "md-b", daemontest.Options{})
	runMsgData(t, nil, da, db)
	da.CheckAlive(t)
	db.CheckAlive(t)
}

// TestMsgDataNetns: the same across two network namespaces (veth, MTU 1500).
func TestMsgDataNetns(t *testing.T) {
	needProvider(t)
	if ok, why := netns.Available(); !ok {
		t.Skip("skipping the network-namespace test: " + why)
	}
	const prefix = "iwmd"
	if err := netns.RemoveStale(prefix); err != nil {
		t.Logf("removing stale namespaces: %v", err)
	}
	addrs := [2]netip.Prefix{netip.MustParsePrefix("169.254.88.1/24"), netip.MustParsePrefix("169.254.88.2/24")}
	pair, err := netns.NewPair(fmt.Sprintf("%s%d", prefix, os.Getpid()), addrs, 1500)
	if err != nil {
		t.Skip("skipping the network-namespace test: ", err)
	}
	t.Cleanup(func() {
		if err := pair.Close(); err != nil {
			t.Errorf("deleting the namespaces: %v", err)
		}
	})
	da := daemon(t, "md-ns-a", daemontest.Options{NS: pair, NSIdx: 0, Addr: addrs[0].Addr().String()})
	db := daemon(t, "md-ns-b", daemontest.Options{NS: pair, NSIdx: 1, Addr: addrs[1].Addr().String()})
	runMsgData(t, pair, da, db)
}
