package libfabric

import (
	"regexp"
	"strconv"
	"testing"

	"github.com/iwarpd/iwarpd/proto"
	"github.com/iwarpd/iwarpd/test/daemontest"
)

// TestFastpathRDMPingPong: FI_EP_RDM tagged ping-pong through two daemons
// with RDM's fast path on (the default: no FI_IWARPD_FASTPATH_RDM;
// docs/fastpath.md "The provider's RDM endpoints"), each side pausing longer than the lease now
// and then. Every message arrives exactly once, in order, intact (the
// program checks); the daemons' counters show the sockets handed to the
// ranks and taken over in the pauses, and the engines reading and sending
// fewer datagrams than the messages: the ranks sent and took the rest
// themselves (RD: without the fast path every message is at least one
// datagram in and out of each engine, ACKs beside).
func TestFastpathRDMPingPong(t *testing.T) {
	needProvider(t)
	o := daemontest.Options{Extra: []string{"-fastpath-lease", "1ms", "-datagram-size", "1472"}}
	da := daemon(t, "fprdm-a", o)
	db := daemon(t, "fprdm-b", o)
	srv, cli, clog := runFPPingPongLog(t, nil, da, db, "RD", []string{"-rdm"}, "FI_LOG_LEVEL=info", "FI_LOG_PROV=iwarpd", "FI_LOG_SUBSYS=ep_data")
	// The client's bursts (8 × 24 sends posted back to back) leave its
	// provider in batches (c/core fprd.h iwvi_fp_rd_flush): fewer
	// sendmmsg calls than the datagrams they carry, and every datagram
	// the rank numbered flushed.
	m := regexp.MustCompile(`RDM fast path: (\d+) sends sent by the rank, \d+ taken, \d+ refused for a full window, (\d+) datagrams in (\d+) flushes`).
		FindStringSubmatch(clog)
	if m == nil {
		t.Fatalf("client: no count of the rank's sends in its log:\n%s", clog)
	}
	sent, _ := strconv.Atoi(m[1])
	flushed, _ := strconv.Atoi(m[2])
	flushes, _ := strconv.Atoi(m[3])
	t.Logf("client's provider: %d sends sent by the rank, %d datagrams in %d flushes", sent, flushed, flushes)
	if sent == 0 || flushed != sent || flushes >= sent {
		t.Errorf("client: %d sends, %d flushed in %d flushes: want every send flushed, in fewer flushes than sends", sent, flushed, flushes)
	}
	for _, q := range []struct {
		who     string
		qp      proto.QPInfo
		in, out int64
	}{{"server", srv, fpToServer, fpToClient}, {"client", cli, fpToClient, fpToServer}} {
		c := q.qp.Counters
		if q.qp.Fastpath == "" || !q.qp.ClientSocket {
			t.Errorf("%s: QP %+v has no fast-path page", q.who, q.qp)
			continue
		}
		if c["fastpath_handbacks"] == 0 || c["fastpath_takeovers"] == 0 || c["fastpath_violations"] != 0 {
			t.Errorf("%s: %d hand-backs, %d take-overs, %d violations: want the socket handed to the rank and taken over in the pauses",
				q.who, c["fastpath_handbacks"], c["fastpath_takeovers"], c["fastpath_violations"])
		}
		if c["datagrams_in"] >= q.in {
			t.Errorf("%s: the engine read %d datagrams for %d messages: the rank took none itself", q.who, c["datagrams_in"], q.in)
		}
		if c["datagrams_out"] >= q.out {
			t.Errorf("%s: the engine sent %d datagrams for %d messages: the rank sent none itself", q.who, c["datagrams_out"], q.out)
		}
		t.Logf("%s: engine read %d and sent %d datagrams for %d and %d messages; hand-backs %d, take-overs %d, releases %d; counters %v",
			q.who, c["datagrams_in"], c["datagrams_out"], q.in, q.out, c["fastpath_handbacks"], c["fastpath_takeovers"], c["fastpath_releases"], c)
	}
	da.CheckAlive(t)
	db.CheckAlive(t)
}

// TestFastpathRDMOff: with FI_IWARPD_FASTPATH_RDM=0 RDM endpoints hand no
// page over and the same program passes, every message through the
// daemons.
func TestFastpathRDMOff(t *testing.T) {
	needProvider(t)
	da := daemon(t, "fprdmoff-a", daemontest.Options{})
	db := daemon(t, "fprdmoff-b", daemontest.Options{})
	srv, cli := runFPPingPong(t, da, db, "RD", []string{"-rdm"}, "FI_IWARPD_FASTPATH_RDM=0")
	for _, q := range []proto.QPInfo{srv, cli} {
		if q.Fastpath != "" {
			t.Errorf("QP %+v has a fast-path page with FI_IWARPD_FASTPATH_RDM=0", q)
		}
	}
	if srv.Counters["datagrams_in"] < fpToServer {
		t.Errorf("server: the engine read %d datagrams for %d messages", srv.Counters["datagrams_in"], fpToServer)
	}
	da.CheckAlive(t)
	db.CheckAlive(t)
}
