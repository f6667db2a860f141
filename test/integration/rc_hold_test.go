package integration

import (
	"fmt"
	"testing"
	"time"

	"github.com/iwarpd/iwarpd/ofverbs"
	"github.com/iwarpd/iwarpd/test/daemontest"
)

// TestRCHoldRecv: two daemons, one RC connection whose accepting QP was
// created with HoldRecv (docs/iwarpd.md "RC receive hold"). The client
// sends messages of 0 B to 1 MiB, some solicited, and an RDMA Write
// between them, all completed at the client before the server posts a
// single receive; then the server posts its receives and gets every
// message, in order, every octet. A Send after that takes its receive
// directly. The server's QP counts the held messages and drops none.
func TestRCHoldRecv(t *testing.T) {
	da, db := startRCDaemons(t, "rchold", daemontest.Options{})
	ctxA, ctxB := da.Open(t, "rc-server"), db.Open(t, "rc-client")
	const half = 4 << 20
	srv := newRCEP(t, "server", ctxA, half, rcAccessAll, func(a *ofverbs.QPInitAttr) { a.HoldRecv = true })
	cli := newRCEP(t, "client", ctxB, half, rcAccessAll)
	l := listenOn(t, ctxA, 0)
	rcConnect(t, l, srv, cli, ofverbs.MPAOptions{})

	sizes := []int{1, 100, 0, 4096, 65536, 1 << 20, 7, 300000, 1448, 2}
	offs := make([]int, len(sizes)+1)
	for i, n := range sizes {
		offs[i+1] = offs[i] + n
	}
	src := cli.src()[:offs[len(sizes)]]
	fillPattern(src, 17)
	for i, n := range sizes {
		if i == 5 { // an RDMA Write among the held Sends lands at once
			w := cli.src()[half-4096:]
			fillPattern(w, 99)
			if err := cli.post(ofverbs.SendWR{ID: 500, Opcode: ofverbs.WRRDMAWrite, SGL: []ofverbs.SGE{cli.mr.SGE(w)},
				Signaled: true, RemoteAddr: srv.mr.SGE(srv.dst()[half-4096:]).Addr, RKey: srv.mr.RKey()}); err != nil {
				t.Fatal(err)
			}
			if _, err := cli.expectWC(cli.scq, 500, ofverbs.WCRDMAWrite, 4096); err != nil {
				t.Fatal(err)
			}
		}
		id := uint64(i + 1)
		if err := cli.post(ofverbs.SendWR{ID: id, Opcode: ofverbs.WRSend, SGL: []ofverbs.SGE{cli.mr.SGE(src[offs[i]:offs[i+1]])},
			Signaled: true, Solicited: i%3 == 0}); err != nil {
			t.Fatal(err)
		}
		if _, err := cli.expectWC(cli.scq, id, ofverbs.WCSend, n); err != nil {
			t.Fatal(err)
		}
	}
	srvAddr := srv.qp.ConnInfo().Local.String()
	eventually(t, "the server's daemon holds every message", 20*time.Second, func() bool {
		c := da.qpCounters(t, srvAddr)
		return c != nil && c["rc_recv_held"] == int64(len(sizes))
	})
	if err := sameBytes("the Write among held Sends", srv.dst()[half-4096:], cli.src()[half-4096:]); err != nil {
		t.Fatal(err)
	}
	dst := srv.dst()[:offs[len(sizes)]]
	clear(dst)
	for i, n := range sizes {
		id := uint64(100 + i)
		if err := srv.postRecv(id, dst[offs[i]:offs[i]+max(n, 1)]); err != nil {
			t.Fatal(err)
		}
		wc, err := srv.expectWC(srv.rcq, id, ofverbs.WCRecv, n)
		if err != nil {
			t.Fatalf("held message %d: %v", i, err)
		}
		if wc.Solicited() != (i%3 == 0) {
			t.Fatalf("held message %d: flags %#x, solicited %v", i, wc.Flags, i%3 == 0)
		}
	}
	if err := sameBytes("held messages", dst, src); err != nil {
		t.Fatal(err)
	}
	// The hold is empty: a Send meets its posted receive as always.
	if err := rcSend(cli, srv, 5000, 4242, sendKind{}); err != nil {
		t.Fatal(err)
	}
	c := da.qpCounters(t, srvAddr)
	if c["rc_recv_held"] != int64(len(sizes)) || c["rc_held_dropped"] != 0 || c["rc_held_msgs"] != 0 || c["rc_held_bytes"] != 0 {
		t.Fatalf("server QP counters: %v", fmt.Sprint(c))
	}
}
