package e2e

import (
	"bytes"
	"testing"

	"github.com/iwarpd/iwarpd/proto"
)

// TestRDRunLane: multi-datagram Sends and an RDMA Read over loopback, GSO
// and GRO on, arrive intact and complete, and most of their datagrams go
// through the receive fast lane (docs/rd.md "Receive fast lane": a
// GRO-coalesced buffer, or a recvmmsg batch, carries the next datagrams
// of the message the general path just delivered); none is lost to it
// (rd_run_lost).
func TestRDRunLane(t *testing.T) {
	_, path := startRD(t, nil)
	a := newRDNode(t, path, 4<<20, 0)
	b := newRDNode(t, path, 4<<20, proto.AccessRemoteRead)
	sizes := []int{65536, 1 << 20, 3 << 20}
	rdExchange(t, a, b, sizes)
	cb := rdCounters(t, path, b.qp.QPN)
	total := 0
	for _, n := range sizes {
		total += n
	}
	t.Logf("receiver: %d datagrams in, %d through the fast lane", cb["datagrams_in"], cb["rd_run_datagrams"])
	if cb["rd_run_datagrams"] == 0 || cb["rd_run_lost"] != 0 {
		t.Errorf("receiver of %d octets in Sends: rd_run_datagrams %d, rd_run_lost %d (counters %v)", total,
			cb["rd_run_datagrams"], cb["rd_run_lost"], cb)
	}
	// An RDMA Read of 3 MiB: its Read Responses run at a.
	const n = 3 << 20
	pattern(b.mr.Buf[:n], 7)
	clear(a.mr.Buf[:n])
	ah := a.ah(t, b)
	a.post(t, proto.SQE{WRID: 77, Opcode: proto.WRRDMARead, Flags: proto.SendSignaled, AH: ah, RKey: b.mr.RKey,
		RemoteAddr: b.mr.Addr(0)}, []proto.SGE{a.mr.SGE(0, n)})
	if c := waitN(t, a.scq, 1, "read")[0]; c.Status != proto.WCSuccess || c.WRID != 77 {
		t.Fatalf("read: %+v", c)
	}
	if !bytes.Equal(a.mr.Buf[:n], b.mr.Buf[:n]) {
		t.Fatal("read: data differs")
	}
	if ca := rdCounters(t, path, a.qp.QPN); ca["rd_run_datagrams"] == 0 || ca["rd_run_lost"] != 0 {
		t.Errorf("requester of a 3 MiB Read: rd_run_datagrams %d, rd_run_lost %d", ca["rd_run_datagrams"], ca["rd_run_lost"])
	}
}
