package e2e

import (
	"fmt"
	"testing"
	"time"

	"github.com/iwarpd/iwarpd/proto"
	"github.com/iwarpd/iwarpd/verbsd/config"
)

// TestRDWriteRecordAsksAck: the last datagram of a Write-Record with
// nothing queued behind it asks for an ACK at once (docs/rd.md "Limits and
// choices"): with a one-hour ACK delay and one-hour retransmission timers,
// lone Write-Records of one and three datagrams, and two posted together,
// still complete. Before, each waited for the target's delayed ACK (here
// an hour: the wait timed out).
func TestRDWriteRecordAsksAck(t *testing.T) {
	_, path := startRD(t, func(c *config.Config) {
		c.RD.Link.AckDelay = time.Hour
		c.RD.Link.MinRTO, c.RD.Link.InitialRTO, c.RD.Link.MaxRTO = time.Hour, time.Hour, time.Hour
	})
	a := newRDNode(t, path, 1<<20, 0)
	b := newRDWrecTarget(t, path, 1<<20)
	// The first message carries the handshake (its resend asks for an ACK
	// at once): acknowledged as usual.
	rdExchange(t, a, b.rdNode, []int{100})
	ah := a.ah(t, b.rdNode)
	seg := ddpPayloadRD(t)
	wrid := uint64(10)
	for _, sizes := range [][]int{{8}, {2*seg + 1}, {8, 8}} {
		b.postRecords(t, 100, 0, len(sizes))
		for _, size := range sizes {
			a.writeRecord(t, ah, wrid, b.mr.RKey, b.mr.Addr(0), 0, size)
			wrid++
		}
		what := fmt.Sprint("Write-Records ", sizes)
		for i, sc := range waitN(t, a.scq, len(sizes), what) {
			if sc.Status != proto.WCSuccess || sc.Opcode != proto.WCWriteRecord || int(sc.ByteLen) != sizes[i] {
				t.Fatalf("%s: send completion %+v", what, sc)
			}
		}
		waitN(t, b.rcq, len(sizes), what+" at the target")
	}
	if ca := rdCounters(t, path, a.qp.QPN); ca["rd_retransmits"] != 0 || ca["wr_errors"] != 0 {
		t.Errorf("sender counters: %v", ca)
	}
}
