package libfabric

import (
	"testing"

	"github.com/iwarpd/iwarpd/test/daemontest"
)

// TestFastpathRDMBulk: a stream of 64 KiB messages over RDM endpoints with
// the fast path on (the default). Each message is several datagrams, which
// only the daemon sends and takes in; the rank leaves its socket with the
// daemon while its messages are such bulk ones (docs/fastpath.md "Bulk
// messages leave the socket with the daemon") instead of taking it back
// after each one: a release and a hand-back per message and side before
// (a run: 400 hand-backs per daemon for 200 round trips), a handful now.
// And the rank reads its socket with UDP_GRO on (proto.FPFlagGRO,
// docs/fastpath.md "UDP_GRO stays on for a rank that reads it"), leaving
// coalesced buffers to the daemon, which takes a message in as one buffer
// per GSO send instead of datagram by datagram (a run before: no buffer
// coalesced, every datagram alone).
// The daemons' counters (iwarpctl -json counters, before and after) must
// show the fast path in use (at least the hand-back at fi_enable), at most
// one hand-back per 10 messages taken in, and coalesced buffers received;
// fi_pingpong -c checks every message's data.
func TestFastpathRDMBulk(t *testing.T) {
	needProvider(t)
	// Datagrams of 1472 octets (an MTU of 1500, as across the veth of the
	// MPI runs): a 64 KiB message is 46 datagrams, sent in GSO batches.
	o := daemontest.Options{Extra: []string{"-datagram-size", "1472"}}
	da := daemon(t, "fpbulk-a", o)
	db := daemon(t, "fpbulk-b", o)
	before := [2]map[string]int64{udCounters(t, da), udCounters(t, db)}
	c := ppCase{name: "rdm-bulk", prov: "iwarpd", ep: "rdm", env: native, iters: "200"}
	pingpong(t, nil, da, db, "127.0.0.1", c, "65536")
	for i, d := range []*daemontest.Daemon{da, db} {
		after := udCounters(t, d)
		diff := func(k string) int64 { return after[k] - before[i][k] }
		hb, rel, in := diff("fastpath_handbacks"), diff("fastpath_releases"), diff("messages_in")
		gro := diff("gro_coalesced")
		t.Logf("daemon %s: %d messages in, %d hand-backs, %d releases, %d take-overs, %d coalesced buffers (%d datagrams in)",
			d.Name, in, hb, rel, diff("fastpath_takeovers"), gro, diff("datagrams_in"))
		if gro < in/2 && diff("gro_unavailable") == 0 {
			t.Errorf("daemon %s: %d coalesced buffers for %d messages of 64 KiB in: want UDP_GRO on the fast path's socket "+
				"(one buffer per GSO send)", d.Name, gro, in)
		}
		if in < 200 {
			t.Errorf("daemon %s: %d messages in for 200 round trips of 64 KiB: want at least 200 (did the run go through it?)", d.Name, in)
		}
		if hb < 1 {
			t.Errorf("daemon %s: no hand-back: the RDM endpoint did not use the fast path", d.Name)
		}
		if hb*10 > in || rel*10 > in {
			t.Errorf("daemon %s: %d hand-backs and %d releases for %d messages in: want at most one per 10 messages "+
				"(the socket left with the daemon while the messages are bulk)", d.Name, hb, rel, in)
		}
	}
	da.CheckAlive(t)
	db.CheckAlive(t)
}
