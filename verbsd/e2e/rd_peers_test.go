package e2e

import (
	"bytes"
	"errors"
	"testing"
	"time"

	"github.com/iwarpd/iwarpd/proto"
	"github.com/iwarpd/iwarpd/verbsd/config"
	"github.com/iwarpd/iwarpd/verbsd/verbsdtest"
)

// newRDNodeSQ is newRDNode with an SQ of sqDepth entries.
func newRDNodeSQ(t *testing.T, path string, size int, sqDepth uint32) *rdNode {
	t.Helper()
	return newDgramNode(t, path, size, proto.QPTypeRD, 0, sqDepth)
}

// A Send to a dead peer (its window closes, its
// datagrams are retried for a long time) holds back neither the later
// Sends to a live peer on the same QP nor their completions, even when
// they are many more than the SQ's depth (the dead one holds no ring
// slot); a later Send to the dead peer waits for the first (completions in
// order per peer).
func TestRDDeadPeerDoesNotBlockOthers(t *testing.T) {
	_, path := startRD(t, func(c *config.Config) {
		c.RD.Link.MaxRetries = 1000 // the dead peer's Sends stay outstanding for the whole test
		c.RD.Link.Window = 8
	})
	a := newRDNodeSQ(t, path, 1<<20, 16)
	dead := newRDNode(t, path, 1<<20, 0)
	live := newRDNode(t, path, 1<<20, 0)
	ahDead, ahLive := a.ah(t, dead), a.ah(t, live)
	dead.c.Close()
	// 256 KiB to the dead peer: more datagrams than its window.
	a.post(t, proto.SQE{WRID: 1, Opcode: proto.WRSend, Flags: proto.SendSignaled, AH: ahDead}, []proto.SGE{a.mr.SGE(0, 256<<10)})
	const n = 100 // > 6× the SQ depth
	const size = 3000
	for i := range n {
		live.recv(t, uint64(1000+i), i*size, size)
	}
	src := a.mr.Buf[256<<10 : 256<<10+n*size]
	pattern(src, 5)
	deadline := time.Now().Add(rdWait())
	var got []proto.CQE
	for i := 0; i < n; {
		err := a.qp.PostSend(proto.SQE{WRID: uint64(10 + i), Opcode: proto.WRSend, Flags: proto.SendSignaled, AH: ahLive},
			[]proto.SGE{a.mr.SGE(256<<10+i*size, size)}, nil)
		switch {
		case err == nil:
			i++
			if i == n/2 { // and one more to the dead peer in the middle
				a.post(t, proto.SQE{WRID: 2, Opcode: proto.WRSend, Flags: proto.SendSignaled, AH: ahDead}, []proto.SGE{a.mr.SGE(0, 100)})
			}
		case errors.Is(err, verbsdtest.ErrFull):
			if time.Now().After(deadline) {
				t.Fatalf("SQ full after %d of %d Sends to the live peer (completions %d): the dead peer holds the ring", i, n, len(got))
			}
			got = append(got, a.scq.Poll()...)
			time.Sleep(50 * time.Microsecond)
		default:
			t.Fatal(err)
		}
	}
	for len(got) < n && time.Now().Before(deadline) {
		got = append(got, a.scq.Wait(n-len(got), 10*time.Millisecond)...)
	}
	if len(got) != n {
		t.Fatalf("%d completions of %d Sends to the live peer: %+v", len(got), n, got)
	}
	for i, c := range got {
		if c.WRID != uint64(10+i) || c.Status != proto.WCSuccess {
			t.Fatalf("completion %d: %+v, want WRID %d success (in order per peer; none for the dead peer)", i, c, 10+i)
		}
	}
	rc := waitN(t, live.rcq, n, "receives")
	for i, c := range rc {
		if c.Status != proto.WCSuccess || c.WRID != uint64(1000+i) || c.ByteLen != size {
			t.Fatalf("receive %d: %+v", i, c)
		}
	}
	if !bytes.Equal(live.mr.Buf[:n*size], src) {
		t.Fatal("payload differs")
	}
	if late := a.scq.Poll(); len(late) != 0 {
		t.Fatalf("completions for the dead peer's Sends: %+v", late)
	}
}
