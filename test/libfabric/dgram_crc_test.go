package libfabric

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/iwarpd/iwarpd/test/daemontest"
)

// crcDaemonFlags shorten RD's retransmissions so that a mismatched pair
// fails within seconds (docs/rd.md "Flags").
var crcDaemonFlags = []string{"-rd-max-retries", "4", "-rd-rto-max", "100ms", "-rd-rto-initial", "20ms"}

// TestDgramCRCOff: FI_IWARPD_DGRAM_CRC=off on both ranks (docs/libfabric.md
// "CRC on datagram endpoints"): fi_pingpong -c passes over RDM, eager and
// rendezvous sizes (RDMA Read), and DGRAM, with no datagram dropped for
// its CRC. That the setting reaches the daemons is what
// TestDgramCRCMismatch shows: with one side off, the other drops.
func TestDgramCRCOff(t *testing.T) {
	needProvider(t)
	da := daemon(t, "a", daemontest.Options{Extra: crcDaemonFlags})
	db := daemon(t, "b", daemontest.Options{Extra: crcDaemonFlags})
	off := append([]string{"FI_IWARPD_DGRAM_CRC=off"}, native...)
	for _, c := range []ppCase{
		{name: "rdm-crc-off", prov: "iwarpd", ep: "rdm", sizes: []string{"1", "65536", "1048576"}, env: off},
		{name: "dgram-crc-off", prov: "iwarpd", ep: "dgram", sizes: []string{"1", "65536"}, env: off},
	} {
		t.Run(c.name, func(t *testing.T) {
			for _, s := range c.sizes {
				pingpong(t, nil, da, db, "127.0.0.1", c, s)
			}
		})
	}
	for _, d := range []*daemontest.Daemon{da, db} {
		if n := udCounters(t, d)["drop_crc"]; n != 0 {
			t.Errorf("daemon %s dropped %d datagrams for their CRC with CRC off on both ranks:\n%s", d.Name, n, d.Stderr)
		}
	}
}

// TestDgramCRCMismatch: the server rank sets FI_IWARPD_DGRAM_CRC=off, the
// client leaves it on. The client's daemon drops every datagram of the
// server (trailer 0) and counts it (drop_crc); its log says which QP,
// which peer, that a trailer of 0 means the peer has CRC off, and to set
// FI_IWARPD_DGRAM_CRC alike on every rank. The client's sends are never
// acknowledged and fail: fi_pingpong exits non-zero, and the provider's
// error text names the setting.
func TestDgramCRCMismatch(t *testing.T) {
	needProvider(t)
	da := daemon(t, "a", daemontest.Options{Extra: crcDaemonFlags})
	db := daemon(t, "b", daemontest.Options{Extra: crcDaemonFlags})
	timeout := daemontest.Scaled(60 * time.Second)
	args := []string{"-p", "iwarpd", "-e", "rdm", "-c", "-I", "10", "-S", "1048576"} // above inject_size: fi_pingpong waits for the send's completion
	var cliOut, srvOut string
	var cliErr error
	for attempt := 0; attempt < 20; attempt++ {
		port := fmt.Sprint(ctrlPort())
		ctx, cancel := context.WithTimeout(context.Background(), timeout)
		srv := command(ctx, nil, 0, "fi_pingpong", append(args, "-B", port)...)
		srv.Env = fiEnv(da, append([]string{"FI_IWARPD_DGRAM_CRC=off"}, native...)...)
		srvBuf := &daemontest.Buffer{}
		srv.Stdout, srv.Stderr = srvBuf, srvBuf
		if err := srv.Start(); err != nil {
			cancel()
			t.Fatal(err)
		}
		srvDone := make(chan error, 1)
		go func() { srvDone <- srv.Wait() }()
		cli := command(ctx, nil, 1, "fi_pingpong", append(args, "-P", port, "127.0.0.1")...)
		cli.Env = fiEnv(db, native...)
		cliOut, cliErr = run(t, cli, timeout)
		srv.Process.Kill() // it may wait for a client that gave up
		<-srvDone
		srvOut = srvBuf.String()
		cancel()
		if strings.Contains(cliOut, "failed to connect") {
			time.Sleep(100 * time.Millisecond)
			continue
		}
		break
	}
	if cliErr == nil {
		t.Fatalf("fi_pingpong passed between ranks with different FI_IWARPD_DGRAM_CRC:\nclient:\n%s\nserver:\n%s", cliOut, srvOut)
	}
	if !strings.Contains(cliOut, "FI_IWARPD_DGRAM_CRC") {
		t.Errorf("the failing client's output does not name FI_IWARPD_DGRAM_CRC:\n%s", cliOut)
	}
	if n := udCounters(t, db)["drop_crc"]; n == 0 {
		t.Errorf("daemon b (CRC on) counted no drop_crc:\n%s", db.Stderr)
	}
	daemontest.Eventually(t, "daemon b's log to explain the CRC drops", 10*time.Second, func() bool {
		log := db.Stderr.String()
		return strings.Contains(log, "CRC32c trailer 0x000000") && strings.Contains(log, "CRC off") &&
			strings.Contains(log, "FI_IWARPD_DGRAM_CRC alike")
	})
	t.Logf("client:\n%s", cliOut)
}
