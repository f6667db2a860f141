package integration

import (
	"errors"
	"net/netip"
	"slices"
	"testing"
	"time"

	"github.com/iwarpd/iwarpd/ofverbs"
	"github.com/iwarpd/iwarpd/proto"
	"github.com/iwarpd/iwarpd/test/daemontest"
	"github.com/iwarpd/iwarpd/verbsd/verbsdtest"
	"golang.org/x/sys/unix"
)

// TestSessionIsolation: session A (ofverbs) holds PDs, MRs, CQs, QPs, an AH
// and an SRQ; session B (the raw client, in the same process but its own
// connection) names A's handles and uses A's lkey. Every handle is EINVAL,
// the key gives protection-error completions, and A never notices.
func TestSessionIsolation(t *testing.T) {
	d := startDaemon(t, "isolation", daemontest.Options{})
	ctxA := d.Open(t, "session-a")
	// Enough objects in A that its later handles exceed anything B has.
	for range 6 {
		if _, err := ctxA.AllocPD(); err != nil {
			t.Fatal(err)
		}
	}
	a1 := newEndpoint(t, "a1", ctxA, endpointOpts{maxMsg: 4096, nslots: 4})
	a2 := newEndpoint(t, "a2", ctxA, endpointOpts{maxMsg: 4096, nslots: 4})
	a1.ahTo(t, a2.qp.Endpoint())
	srqA, err := a1.pd.CreateSRQ(ofverbs.SRQInitAttr{MaxWR: 8, MaxSGE: 1})
	if err != nil {
		t.Fatal(err)
	}

	b, err := verbsdtest.Dial(d.Sock, false)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	pdB, err := b.AllocPD()
	if err != nil {
		t.Fatal(err)
	}
	mrB, err := b.RegMR(pdB, 1<<16, proto.AccessLocalWrite)
	if err != nil {
		t.Fatal(err)
	}
	cqB, err := b.CreateCQ(64, 0)
	if err != nil {
		t.Fatal(err)
	}
	caps := proto.QPCaps{MaxSendWR: 16, MaxRecvWR: 16, MaxSendSGE: 1, MaxRecvSGE: 1}
	qpB, err := b.CreateQP(pdB, cqB, cqB, caps, verbsdtest.QPOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if err := qpB.ToRTS(); err != nil {
		t.Fatal(err)
	}
	mine := []uint32{pdB, mrB.Handle, cqB.Handle, qpB.Handle}
	foreign := func(name string, h uint32) uint32 {
		if slices.Contains(mine, h) {
			t.Fatalf("A's %s handle %d also names an object of B: make A hold more objects", name, h)
		}
		return h
	}
	pdA := foreign("PD", a1.pd.Handle())
	cqA := foreign("CQ", a1.rcq.Handle())
	qpA := foreign("QP", a1.qp.Handle())
	srqHandleA := foreign("SRQ", srqA.Handle())
	einval := func(what string, err error) {
		t.Helper()
		var ce *verbsdtest.CallError
		if !errors.As(err, &ce) || ce.Errno != unix.EINVAL {
			t.Errorf("%s with A's handle: %v, want EINVAL", what, err)
		}
	}
	var qr proto.QueryQPReply
	_, err = b.Call(proto.OpQueryQP, proto.Handle{Handle: qpA}, &qr)
	einval("query QP", err)
	_, err = b.Call(proto.OpModifyQP, proto.ModifyQPRequest{QP: qpA, State: proto.QPStateError}, nil)
	einval("modify QP", err)
	_, err = b.Call(proto.OpDestroyQP, proto.Handle{Handle: qpA}, nil)
	einval("destroy QP", err)
	_, err = b.Call(proto.OpDestroyCQ, proto.Handle{Handle: cqA}, nil)
	einval("destroy CQ", err)
	_, err = b.Call(proto.OpDestroySRQ, proto.Handle{Handle: srqHandleA}, nil)
	einval("destroy SRQ", err)
	_, err = b.Call(proto.OpDeallocPD, proto.Handle{Handle: pdA}, nil)
	einval("dealloc PD", err)
	_, err = b.RegMR(pdA, 4096, proto.AccessLocalWrite)
	einval("register MR on PD", err)
	_, err = b.CreateQP(pdB, &verbsdtest.CQ{Handle: cqA}, cqB, caps, verbsdtest.QPOptions{})
	einval("create QP on CQ", err)
	_, err = b.CreateQP(pdA, cqB, cqB, caps, verbsdtest.QPOptions{})
	einval("create QP on PD", err)

	// A's lkey (and address) in B's send: a protection error on B's QP.
	ahB, err := b.CreateAH(pdB, a2.qp.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	sgeA := proto.SGE{Addr: a1.mr.Addr(), Length: 64, LKey: a1.mr.LKey()}
	if err := qpB.PostSend(proto.SQE{WRID: 5, AH: ahB, QKey: a2.qp.QKey(), Flags: proto.SendSignaled}, []proto.SGE{sgeA}, nil); err != nil {
		t.Fatal(err)
	}
	if got := cqB.Wait(1, scaled(10*time.Second)); len(got) != 1 || got[0].Status != proto.WCLocProtErr || got[0].WRID != 5 {
		t.Errorf("send with A's lkey: %+v, want a protection error", got)
	}
	// A's lkey in B's receive: the arriving message errors B's receive.
	qpB3, err := b.CreateQP(pdB, cqB, cqB, caps, verbsdtest.QPOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if err := qpB3.ToRTS(); err != nil {
		t.Fatal(err)
	}
	if err := b.PostRecv(qpB3.RQ, 7, []proto.SGE{sgeA}); err != nil {
		t.Fatal(err)
	}
	toB3 := a1.ahTo(t, ofverbs.Endpoint{Addr: mustAddrPort(t, qpB3.Addr), QKey: qpB3.QKey})
	if err := a1.send(toB3, 3, 40); err != nil {
		t.Fatal(err)
	}
	if err := a1.reapSend(3, 40, 10*time.Second); err != nil {
		t.Fatal(err)
	}
	if got := cqB.Wait(1, scaled(10*time.Second)); len(got) != 1 || got[0].Status != proto.WCLocProtErr || got[0].WRID != 7 {
		t.Errorf("receive into A's lkey: %+v, want a protection error", got)
	}
	// A's memory was not written, and A is unaffected.
	if !slicesEqualPattern(a1) {
		t.Error("A's registered memory changed")
	}
	st, err := pingPong(a1, a2, 50, sizeSchedule{cycle: []int{0, 64, 1450, 4000}}, t.Logf)
	if err != nil || st.messages != 100 {
		t.Fatalf("session A after B's attempts: %d messages, %v", st.messages, err)
	}
	if s, err := a1.qp.Query(); err != nil || s.State != proto.QPStateRTS {
		t.Errorf("A's QP: %+v, %v", s, err)
	}
}

// slicesEqualPattern checks that e's pattern is intact.
func slicesEqualPattern(e *endpoint) bool {
	for i, v := range e.pattern {
		if v != byte(i%patPeriod) {
			return false
		}
	}
	return true
}

func mustAddrPort(t *testing.T, s string) netip.AddrPort {
	t.Helper()
	a, err := netip.ParseAddrPort(s)
	if err != nil {
		t.Fatal(err)
	}
	return a
}
