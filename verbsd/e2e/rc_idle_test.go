package e2e

import (
	"testing"
	"time"

	"github.com/iwarpd/iwarpd/proto"
)

// TestRCReadIdleResponder: RDMA Reads one at a time, the responder on its
// own engine with nothing posted (so it is woken by its socket only).
func TestRCReadIdleResponder(t *testing.T) {
	srvA, pathA := rcServer(t)
	srvB, pathB := rcServer(t)
	a := newRCEnd(t, srvA, pathA, rcOpts{bufSize: 1 << 16})
	b := newRCEnd(t, srvB, pathB, rcOpts{bufSize: 1 << 16})
	pi, pr := rcParams(true, false, 16, 16)
	connectRC(t, a, b, pi, pr, 0)
	rcFill(b.mr.Buf, 5)
	const reads = 2000
	deadline := time.Now().Add(60 * time.Second)
	for i := range reads {
		src := (i * 64) % (1<<16 - 64)
		a.postSend(proto.SQE{WRID: uint64(i), Opcode: proto.WRRDMARead, Flags: proto.SendSignaled, RKey: b.mr.RKey,
			RemoteAddr: b.mr.Addr(src)}, []proto.SGE{a.mr.SGE((i%2)*64, 64)}, nil)
		got := a.scq.Wait(1, 2*time.Second)
		if len(got) != 1 {
			t.Fatalf("read %d: %d completions after 2s: %v", i, len(got), a.counters())
		}
		if c := got[0]; c.WRID != uint64(i) || c.Status != proto.WCSuccess {
			t.Fatalf("read %d: completion %+v", i, c)
		}
		if time.Now().After(deadline) {
			t.Fatalf("too slow: %d reads", i)
		}
	}
}
