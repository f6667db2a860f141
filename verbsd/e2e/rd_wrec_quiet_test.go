package e2e

import (
	"bytes"
	"fmt"
	"testing"
	"time"

	"github.com/iwarpd/iwarpd/proto"
	"github.com/iwarpd/iwarpd/verbsd/verbsdtest"
)

// newRDQuietTarget is an RD node created with quiet_records whose mr peers
// may write.
func newRDQuietTarget(t *testing.T, path string, size int) *rdNode {
	t.Helper()
	c, err := verbsdtest.Dial(path, false)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	n := &rdNode{c: c}
	check := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	n.pd, err = c.AllocPD()
	check(err)
	n.mr, err = c.RegMR(n.pd, size, proto.AccessLocalWrite|proto.AccessRemoteWrite)
	check(err)
	n.scq, err = c.CreateCQ(4096, 0)
	check(err)
	n.rcq, err = c.CreateCQ(4096, 0)
	check(err)
	caps := proto.QPCaps{MaxSendWR: 1024, MaxRecvWR: 1024, MaxSendSGE: 4, MaxRecvSGE: 4, MaxInline: 64}
	n.qp, err = c.CreateQP(n.pd, n.scq, n.rcq, caps, verbsdtest.QPOptions{Type: proto.QPTypeRD, QuietRecords: true})
	check(err)
	check(n.qp.ToRTS())
	return n
}

// TestRDWriteRecordQuiet: a target QP created with quiet_records and no
// receive posted takes Write-Records (one octet to 1 MiB, 300 of them:
// more than the provider's 256 bounce receives) as they come: every one
// completes at the initiator, the data is placed, the target's receive CQ
// stays empty and its counters show every record complete, none without a
// receive, no NOTREADY. A Send to it still needs (and takes) a receive.
// Without the option the first Write-Record waited (NOTREADY) for a
// receive: here, for ever.
func TestRDWriteRecordQuiet(t *testing.T) {
	_, path := startRD(t, nil)
	a := newRDNode(t, path, 2<<20, 0)
	b := newRDQuietTarget(t, path, 2<<20)
	ah := a.ah(t, b)
	seg := ddpPayloadRD(t)
	sizes := []int{1, 8, seg, 2*seg + 3, 65536, 1 << 20}
	const n = 300
	total := 0
	for i := range n {
		size := sizes[i%len(sizes)]
		src := a.mr.Buf[:size]
		pattern(src, i)
		a.writeRecord(t, ah, uint64(i), b.mr.RKey, b.mr.Addr(0), 0, size)
		sc := waitN(t, a.scq, 1, fmt.Sprint("Write-Record ", i))[0]
		if sc.Status != proto.WCSuccess || sc.Opcode != proto.WCWriteRecord || int(sc.ByteLen) != size || sc.WRID != uint64(i) {
			t.Fatalf("Write-Record %d (%d octets): send completion %+v", i, size, sc)
		}
		if !bytes.Equal(b.mr.Buf[:size], src) {
			t.Fatalf("Write-Record %d (%d octets): target buffer differs", i, size)
		}
		total += size
	}
	if got := b.rcq.Poll(); len(got) != 0 {
		t.Fatalf("target receive CQ: %d completions (%+v), want none", len(got), got[0])
	}
	cb := rdCounters(t, path, b.qp.QPN)
	if cb["wrec_complete"] != n || cb["wrec_no_recv"] != 0 || cb["rd_notready"] != 0 || cb["wrec_dropped"] != 0 ||
		cb["messages_in"] != n || cb["bytes_in"] != int64(total) {
		t.Errorf("target counters: %v", cb)
	}
	// A Send still takes a receive: it completes into the one posted.
	a.post(t, proto.SQE{WRID: 1000, Opcode: proto.WRSend, Flags: proto.SendSignaled, AH: ah}, []proto.SGE{a.mr.SGE(0, 100)})
	time.Sleep(20 * time.Millisecond) // it waits (NOTREADY) for the receive
	b.recv(t, 2000, 0, 4096)
	if sc := waitN(t, a.scq, 1, "send")[0]; sc.Status != proto.WCSuccess {
		t.Fatalf("send completion %+v", sc)
	}
	if rc := waitN(t, b.rcq, 1, "receive")[0]; rc.Status != proto.WCSuccess || rc.WRID != 2000 || rc.Opcode != proto.WCRecv ||
		rc.ByteLen != 100 {
		t.Fatalf("receive completion %+v", rc)
	}
}

// TestRDQuietRecordsIsRDOnly: quiet_records on a UD or RC QP is refused.
func TestRDQuietRecordsIsRDOnly(t *testing.T) {
	_, path := startRD(t, nil)
	c, err := verbsdtest.Dial(path, false)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	pd, err := c.AllocPD()
	if err != nil {
		t.Fatal(err)
	}
	cq, err := c.CreateCQ(64, 0)
	if err != nil {
		t.Fatal(err)
	}
	caps := proto.QPCaps{MaxSendWR: 16, MaxRecvWR: 16, MaxSendSGE: 1, MaxRecvSGE: 1}
	for _, typ := range []proto.QPType{proto.QPTypeUD, proto.QPTypeRC} {
		if _, err := c.CreateQP(pd, cq, cq, caps, verbsdtest.QPOptions{Type: typ, QuietRecords: true}); err == nil {
			t.Errorf("QP type %d with quiet_records: created", typ)
		}
	}
}
