package e2e

import (
	"encoding/binary"
	"net/netip"
	"testing"
	"time"

	"github.com/iwarpd/iwarpd/ddp"
	"github.com/iwarpd/iwarpd/proto"
	"github.com/iwarpd/iwarpd/rdmap"
	"github.com/iwarpd/iwarpd/verbsd/config"
	"github.com/iwarpd/iwarpd/verbsd/rd"
	"github.com/iwarpd/iwarpd/verbsd/verbsdtest"
)

// postAtomic posts an atomic from n to the 8 octets at off of target's MR,
// its result into n's MR at resOff.
func (n *rdNode) postAtomic(t *testing.T, wrid uint64, op proto.SendOpcode, ah proto.AddressVector, target *rdNode, off int,
	ops proto.AtomicOperands, resOff int) {
	t.Helper()
	body := make([]byte, proto.AtomicOperandsLen+proto.SGELen)
	ops.Put(body)
	n.mr.SGE(resOff, 8).Put(body[proto.AtomicOperandsLen:])
	// The body travels as the "inline" argument of verbsdtest (not flagged
	// inline): operands, then the one result SGE.
	e := proto.SQE{WRID: wrid, Opcode: op, Flags: proto.SendSignaled, NumSGE: 1, AH: ah,
		RKey: target.mr.RKey, RemoteAddr: target.mr.Addr(off)}
	if err := n.qp.PostSend(e, nil, body); err != nil {
		t.Fatal(err)
	}
}

// TestRDAtomicLossDupReorder: FetchAdds over RD through a link that drops,
// duplicates and reorders datagrams execute exactly once each: the RD layer
// drops the duplicates (rd_dup) before RDMAP, the counter ends at the number
// of operations and every fetched value is unique.
func TestRDAtomicLossDupReorder(t *testing.T) {
	srv, path := startRD(t, func(c *config.Config) { c.GSO = false })
	link := &lossyLink{drop: 7, dup: 3, reorder: 11}
	link.install(srv)
	a := newRDNode(t, path, 1<<16, 0)
	b := newRDNode(t, path, 1<<16, proto.AccessRemoteAtomic)
	ah := a.ah(t, b)
	const count = 300
	for i := range count {
		a.postAtomic(t, uint64(i), proto.WRFetchAdd, ah, b, 0, proto.AtomicOperands{CompareAdd: 1}, 64+8*i)
	}
	scs := waitN(t, a.scq, count, "atomic")
	seen := make([]bool, count)
	for i, sc := range scs {
		if sc.Status != proto.WCSuccess || sc.WRID != uint64(i) || sc.Opcode != proto.WCFetchAdd || sc.ByteLen != 8 {
			t.Fatalf("atomic %d: %+v", i, sc)
		}
		v := binary.NativeEndian.Uint64(a.mr.Buf[64+8*i:])
		if v >= count || seen[v] {
			t.Fatalf("atomic %d fetched %d (seen before: %v)", i, v, v < count && seen[v])
		}
		seen[v] = true
	}
	if got := binary.NativeEndian.Uint64(b.mr.Buf); got != count {
		t.Fatalf("counter %d after %d FetchAdds", got, count)
	}
	d, u := link.counts()
	cb := rdCounters(t, path, b.qp.QPN)
	if d == 0 || u == 0 || cb["rd_dup"] == 0 || cb["atomics_in"] != count {
		t.Fatalf("link dropped %d duplicated %d; target counters %v", d, u, cb)
	}
}

// TestRDAtomicReplayCache: an Atomic Request delivered again above the RD
// layer (what llp/rd admits after it forgot a sequence space) is answered
// from the responder's replay cache, never executed twice; a different
// request reusing the identifier runs.
func TestRDAtomicReplayCache(t *testing.T) {
	srv, path := startRD(t, nil)
	a := newRDNode(t, path, 1<<16, 0)
	b := newRDNode(t, path, 1<<16, proto.AccessRemoteAtomic)
	ah := a.ah(t, b)
	a.postAtomic(t, 1, proto.WRFetchAdd, ah, b, 0, proto.AtomicOperands{CompareAdd: 5}, 64)
	if sc := waitN(t, a.scq, 1, "atomic"); sc[0].Status != proto.WCSuccess {
		t.Fatalf("atomic: %+v", sc[0])
	}
	deliver := func(to uint64) {
		t.Helper()
		err := srv.Device().Engs[0].Do(func() error {
			var qa, qb *rd.QP
			for _, q := range allQPs(srv) {
				switch q.QPN {
				case a.qp.QPN:
					qa = rd.QPOf(q)
				case b.qp.QPN:
					qb = rd.QPOf(q)
				}
			}
			req := rdmap.AtomicRequest{Op: rdmap.AtomicFetchAdd, ReqID: qa.Rd.NextReqID, Stag: b.mr.RKey, TO: to, AddSwap: 5}
			h := ddp.Header{Last: true, Version: ddp.Version, ULPControl: uint8(rdmap.MakeControl(rdmap.OpAtomicRequest)),
				QN: rdmap.QNReadRequest, MSN: 1}
			seg := req.Append(h.Append(nil))
			src := netip.MustParseAddrPort(a.qp.Addr)
			qb.E.RdAtomicRequest(qb, src, &h, seg, ddp.UntaggedHeaderLen)
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	deliver(b.mr.Addr(0)) // the same request again
	if got := binary.NativeEndian.Uint64(b.mr.Buf); got != 5 {
		t.Fatalf("counter %d after a replayed FetchAdd of 5, want 5", got)
	}
	deliver(b.mr.Addr(8)) // same identifier, another target: a new request
	if got := binary.NativeEndian.Uint64(b.mr.Buf[8:]); got != 5 {
		t.Fatalf("word 8 is %d, want 5 (a different request under a reused identifier runs)", got)
	}
	cb := rdCounters(t, path, b.qp.QPN)
	if cb["atomic_replays"] != 1 || cb["atomics_in"] != 2 {
		t.Fatalf("target counters %v: want atomic_replays 1, atomics_in 2", cb)
	}
	// The requester drops the answers to requests it does not have.
	waitFor(t, func() bool { return rdCounters(t, path, a.qp.QPN)["rd_drop_response"] == 2 }, "requester dropping 2 stray responses")
}

// waitFor polls cond (bounded in count and time) until it holds.
func waitFor(t *testing.T, cond func() bool, what string) {
	t.Helper()
	deadline := time.Now().Add(rdWait())
	for i := 0; i < 100000 && time.Now().Before(deadline); i++ {
		if cond() {
			return
		}
		time.Sleep(time.Millisecond)
	}
	t.Fatalf("timed out waiting for %s", what)
}

// TestRDAtomicQPDepth: a QP's max_rd_atomic (QPCaps.MaxRdAtomic) bounds
// its outstanding atomics (1: one at a time, all still complete in order);
// beyond the limit CreateQP fails.
func TestRDAtomicQPDepth(t *testing.T) {
	_, path := startRD(t, nil)
	b := newRDNode(t, path, 1<<16, proto.AccessRemoteAtomic)
	a := newRDNode(t, path, 1<<16, 0)
	caps := proto.QPCaps{MaxSendWR: 64, MaxRecvWR: 64, MaxSendSGE: 1, MaxRecvSGE: 1, MaxRdAtomic: 1, MaxDestRdAtomic: 1}
	qp, err := a.c.CreateQP(a.pd, a.scq, a.rcq, caps, verbsdtest.QPOptions{Type: proto.QPTypeRD})
	if err != nil {
		t.Fatal(err)
	}
	if err := qp.ToRTS(); err != nil {
		t.Fatal(err)
	}
	a.qp = qp
	ah := a.ah(t, b)
	for i := range 20 {
		a.postAtomic(t, uint64(i), proto.WRCmpSwap, ah, b, 0, proto.AtomicOperands{CompareAdd: uint64(i), Swap: uint64(i + 1)}, 64+8*i)
	}
	for i, sc := range waitN(t, a.scq, 20, "atomic") {
		if sc.Status != proto.WCSuccess || sc.WRID != uint64(i) || binary.NativeEndian.Uint64(a.mr.Buf[64+8*i:]) != uint64(i) {
			t.Fatalf("CmpSwap %d: %+v, fetched %d", i, sc, binary.NativeEndian.Uint64(a.mr.Buf[64+8*i:]))
		}
	}
	caps.MaxRdAtomic = rd.RdMaxDepth + 1
	if _, err := a.c.CreateQP(a.pd, a.scq, a.rcq, caps, verbsdtest.QPOptions{Type: proto.QPTypeRD}); err == nil {
		t.Fatal("CreateQP accepted max_rd_atomic beyond the limit")
	}
}
