package fastpath

import (
	"encoding/json"
	"os/exec"
	"testing"
	"time"

	"github.com/iwarpd/iwarpd/ofverbs"
	"github.com/iwarpd/iwarpd/proto"
	"github.com/iwarpd/iwarpd/test/daemontest"
)

// TestOwnGROQueued: UDP_GRO goes off on a UD rank's socket only over an
// empty queue (verbsd/rnic/fastpath_gro.go, docs/fastpath.md "UDP_GRO
// goes off only over an empty queue"). The rank (t_fpown groqueue) makes
// its QP with no receive and no page; the peer (ofverbs, through a second
// daemon) sends it one Send of 6000 octets, which its daemon sends as one
// GSO buffer of several datagrams and which waits whole in the rank's
// socket, coalesced (UDP_GRO on, the QP parked for want of a receive).
// Then the rank hands its page over (no FPFlagGRO), posts a receive and
// asks for its socket: the engine must deliver the Send intact before the
// socket goes to the rank, which then reads with UDP_GRO off. When the
// daemon turned UDP_GRO off at the page, it read the buffer as one
// datagram with a bad CRC and dropped it (drop_crc 1, no completion).
func TestOwnGROQueued(t *testing.T) {
	const size = 6000
	// Datagrams of an Ethernet MTU (loopback's would carry the Send in one).
	a := daemontest.Start(t, "rank", daemontest.Options{Ports: ownBlocks.Next(), Extra: dgramSize})
	b := daemontest.Start(t, "peer", daemontest.Options{Ports: ownBlocks.Next(), Extra: dgramSize})
	p := startRank(t, a.Sock, "groqueue")
	addr, qkey := p.ready()

	ctx := b.Open(t, "peer")
	e := newLiveEnd(t, "peer", ctx, ofverbs.QPTypeUD)
	ah, err := e.pd.CreateAHTo(ofverbs.Endpoint{Addr: addr, QKey: qkey})
	if err != nil {
		t.Fatal(err)
	}
	for i := range size {
		e.mem[i] = byte(i*7 + 3)
	}
	if k, err := e.qp.PostSend([]ofverbs.SendWR{{ID: 1, Opcode: ofverbs.WRSend, AH: ah, Signaled: true,
		SGL: []ofverbs.SGE{e.mr.SGE(e.mem[:size])}}}); k != 1 {
		t.Fatalf("peer: post send: %v", err)
	}
	e.wait(e.scq)

	// The rank's daemon parks the QP once it has seen the Send at the
	// head of the socket (a peek) with no receive for it.
	var row proto.QPInfo
	deadline := time.Now().Add(daemontest.Scaled(20 * time.Second))
	for i := 0; ; i++ {
		row = onlyQP(t, a)
		if row.Counters["recv_parked"] >= 1 {
			break
		}
		if i > 10000 || time.Now().After(deadline) {
			t.Fatalf("the rank's QP was not parked within %v: %+v", daemontest.Scaled(20*time.Second), row.Counters)
		}
		time.Sleep(10 * time.Millisecond)
	}
	if g := onlyQP(t, b).Counters["gso_sends"]; g != 1 {
		t.Fatalf("the peer's daemon sent the Send in %d GSO sends, want 1", g)
	}

	p.in.Write([]byte("go\n"))
	res := parseResult(t, p.line("result"))
	row = onlyQP(t, a)
	c := row.Counters
	t.Logf("rank: %v; daemon: drop_crc %d gro_coalesced %d fastpath_gro_waits %d handbacks %d", res, c["drop_crc"],
		c["gro_coalesced"], c["fastpath_gro_waits"], c["fastpath_handbacks"])
	if res["len"] != size || res["status"] != 0 || res["pattern"] != 1 {
		t.Fatalf("the Send queued before the page: length %d status %d octets right %d, want %d, 0, 1 "+
			"(drop_crc %d: read as one datagram with UDP_GRO off?)", res["len"], res["status"], res["pattern"], size, c["drop_crc"])
	}
	if c["gro_coalesced"] < 1 {
		t.Errorf("gro_coalesced %d: the Send did not wait in the socket as one coalesced buffer (the test shows nothing)", c["gro_coalesced"])
	}
	if c["drop_crc"] != 0 {
		t.Errorf("drop_crc %d, want 0", c["drop_crc"])
	}
	// (Whether the rank still owns its socket is not checked: a rank
	// descheduled past its lease loses it, legitimately.)
	if res["gro"] != 0 || c["fastpath_handbacks"] < 1 {
		t.Errorf("UDP_GRO %d on the rank's socket after %d hand-backs; want 0, at least 1", res["gro"], c["fastpath_handbacks"])
	}
	p.finish()
}

// onlyQP returns the one QP of d (iwarpctl -json qps).
func onlyQP(t *testing.T, d *daemontest.Daemon) proto.QPInfo {
	t.Helper()
	out, err := exec.Command(daemontest.Bins["iwarpctl"], "-socket", d.Sock, "-json", "qps").Output()
	if err != nil {
		t.Fatalf("iwarpctl -json qps: %v", err)
	}
	var rows []proto.QPInfo
	if err := json.Unmarshal(out, &rows); err != nil || len(rows) != 1 {
		t.Fatalf("iwarpctl -json qps: %d QPs (%v), want 1:\n%s", len(rows), err, out)
	}
	return rows[0]
}
