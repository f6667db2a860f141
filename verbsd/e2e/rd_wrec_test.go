package e2e

import (
	"bytes"
	"fmt"
	"testing"
	"time"

	"github.com/iwarpd/iwarpd/proto"
	"github.com/iwarpd/iwarpd/rdmap"
	"github.com/iwarpd/iwarpd/verbsd/config"
	"github.com/iwarpd/iwarpd/verbsd/rd"
	"github.com/iwarpd/iwarpd/verbsd/rnic"
	"github.com/iwarpd/iwarpd/verbsd/ud"
	"github.com/iwarpd/iwarpd/verbsd/verbsdtest"
)

// rdWrecTarget is an RD node whose mr peers may write, plus a region for
// the records its receives get.
type rdWrecTarget struct {
	*rdNode
	recs *verbsdtest.MR
}

const rdRecSlot = 64 // receive buffer of one record: count + 7 ranges

func newRDWrecTarget(t *testing.T, path string, size int) *rdWrecTarget {
	t.Helper()
	n := newRDNode(t, path, size, proto.AccessRemoteWrite)
	recs, err := n.c.RegMR(n.pd, 1024*rdRecSlot, proto.AccessLocalWrite)
	if err != nil {
		t.Fatal(err)
	}
	return &rdWrecTarget{n, recs}
}

// postRecords posts count receives for records, wrid first+i into slot
// slot0+i.
func (b *rdWrecTarget) postRecords(t *testing.T, first uint64, slot0, count int) {
	t.Helper()
	for k := range count {
		i := slot0 + k
		s := b.recs.Buf[i*rdRecSlot : (i+1)*rdRecSlot]
		for j := range s {
			s[j] = 0xee
		}
		if err := b.c.PostRecv(b.qp.RQ, first+uint64(k), []proto.SGE{b.recs.SGE(i*rdRecSlot, rdRecSlot)}); err != nil {
			t.Fatal(err)
		}
	}
}

func (a *rdNode) writeRecord(t *testing.T, ah proto.AddressVector, wrid uint64, rkey uint32, to uint64, off, size int) {
	t.Helper()
	a.post(t, proto.SQE{WRID: wrid, Opcode: proto.WRWriteRecord, Flags: proto.SendSignaled, AH: ah, RKey: rkey, RemoteAddr: to},
		[]proto.SGE{a.mr.SGE(off, size)})
}

// checkRecord checks a record completion and the record in its receive
// slot: the whole message, one range {0, size}.
func checkRecord(t *testing.T, what string, rc proto.CQE, b *rdWrecTarget, slot int, wrid uint64, src string, to uint64, size int) {
	t.Helper()
	if rc.Status != proto.WCSuccess || rc.Opcode != proto.WCRecvWriteRecord || rc.WRID != wrid || int(rc.ByteLen) != size ||
		rc.InvStag != b.mr.RKey || rc.TO != to || rc.Src.String() != src || rc.Flags&proto.WCFlagSrcValid == 0 ||
		rc.Flags&proto.WCFlagRecordTrim != 0 || rc.QPN != b.qp.QPN {
		t.Fatalf("%s: record completion %+v (want wrid %d src %s stag %#x to %#x len %d)", what, rc, wrid, src, b.mr.RKey, to, size)
	}
	want := []wrange{{0, uint32(size)}}
	if size == 0 {
		want = nil
	}
	if got := parseRecord(t, b.recs.Buf[slot*rdRecSlot:]); !equalRanges(got, want) {
		t.Fatalf("%s: record %v, want %v", what, got, want)
	}
}

// TestRDWriteRecordSizes: Write-Records of 0 B..16 MiB over RD: the data
// lands at the (unaligned) tagged offset and nowhere else, the send
// completes WCWriteRecord, the target gets one record completion with the
// source, STag, base TO, length and one range {0, len}.
func TestRDWriteRecordSizes(t *testing.T) {
	_, path := startRD(t, nil)
	a := newRDNode(t, path, 17<<20, 0)
	b := newRDWrecTarget(t, path, 17<<20)
	ah := a.ah(t, b.rdNode)
	const base = 5
	seg := ddpPayloadRD(t)
	sizes := []int{0, 1, 100, seg - 1, seg, seg + 1, 3*seg + 7, 65536, 1 << 20, 16 << 20}
	for i, size := range sizes {
		src := a.mr.Buf[:size]
		pattern(src, i)
		clear(b.mr.Buf[:size+2*base])
		b.postRecords(t, uint64(100+i), 0, 1)
		to := b.mr.Addr(base)
		a.writeRecord(t, ah, uint64(i), b.mr.RKey, to, 0, size)
		sc := waitN(t, a.scq, 1, "send")[0]
		if sc.Status != proto.WCSuccess || sc.Opcode != proto.WCWriteRecord || int(sc.ByteLen) != size || sc.WRID != uint64(i) ||
			sc.QPN != a.qp.QPN {
			t.Fatalf("size %d: send completion %+v", size, sc)
		}
		rc := waitN(t, b.rcq, 1, "record")[0]
		checkRecord(t, fmt.Sprint("size ", size), rc, b, 0, uint64(100+i), a.qp.Addr, to, size)
		if !bytes.Equal(b.mr.Buf[base:base+size], src) {
			t.Fatalf("size %d: target buffer differs", size)
		}
		if b.mr.Buf[base-1] != 0 || b.mr.Buf[base+size] != 0 {
			t.Fatalf("size %d: octets around the target written", size)
		}
	}
	cb := rdCounters(t, path, b.qp.QPN)
	if cb["wrec_complete"] != int64(len(sizes)) || cb["wrec_trimmed"] != 0 || cb["wrec_access_errors"] != 0 ||
		cb["wrec_dropped"] != 0 || cb["wrec_no_recv"] != 0 {
		t.Errorf("target counters: %v", cb)
	}
	if ca := rdCounters(t, path, a.qp.QPN); ca["messages_out"] != int64(len(sizes)) || ca["wr_errors"] != 0 {
		t.Errorf("sender counters: %v", ca)
	}
}

// ddpPayloadRD is the payload of one RD Write-Record segment at the default
// datagram size (the sizes around it test segmentation edges).
func ddpPayloadRD(t *testing.T) int {
	t.Helper()
	cfg := config.DefaultConfig()
	e := &rd.Engine{Engine: &ud.Engine{Engine: &rnic.Engine{Cfg: &cfg}}}
	n := e.RdMaxPayload(true, rdmap.WriteRecordLen)
	if n < 1000 || n > 65000 {
		t.Fatalf("RD Write-Record payload %d", n)
	}
	return n
}

// TestRDWriteRecordLossy: over a link that drops, duplicates and reorders
// datagrams (the engine's sendmmsg hook), many Write-Records posted at once
// each complete exactly once at the target, whole (one range {0, len}),
// with the data intact, and every send completes successfully in order.
func TestRDWriteRecordLossy(t *testing.T) {
	srv, path := startRD(t, func(c *config.Config) { c.GSO = false })
	link := &lossyLink{drop: 7, dup: 5, reorder: 11}
	link.install(srv)
	a := newRDNode(t, path, 8<<20, 0)
	b := newRDWrecTarget(t, path, 8<<20)
	defer func() {
		if t.Failed() {
			d, u := link.counts()
			t.Logf("link dropped %d duplicated %d\nsender %v\ntarget %v", d, u, rdCounters(t, path, a.qp.QPN), rdCounters(t, path, b.qp.QPN))
		}
	}()
	ah := a.ah(t, b.rdNode)
	const count, slot = 100, 64 << 10
	size := func(i int) int {
		if i == count-1 {
			return slot
		}
		return (i * 4099) % slot
	}
	b.postRecords(t, 1000, 0, count)
	for i := range count {
		pattern(a.mr.Buf[i*slot:i*slot+size(i)], i)
		a.writeRecord(t, ah, uint64(i), b.mr.RKey, b.mr.Addr(i*slot), i*slot, size(i))
	}
	scs := waitN(t, a.scq, count, "send")
	for i, sc := range scs {
		if sc.Status != proto.WCSuccess || sc.WRID != uint64(i) || sc.Opcode != proto.WCWriteRecord || int(sc.ByteLen) != size(i) {
			t.Fatalf("send %d: %+v", i, sc)
		}
	}
	rcs := waitN(t, b.rcq, count, "record")
	for k, rc := range rcs {
		// Records complete in the order their messages complete (in
		// order: one sender); receive k holds the k-th record.
		i := k
		checkRecord(t, fmt.Sprint("record ", i), rc, b, k, uint64(1000+k), a.qp.Addr, b.mr.Addr(i*slot), size(i))
		if !bytes.Equal(b.mr.Buf[i*slot:i*slot+size(i)], a.mr.Buf[i*slot:i*slot+size(i)]) {
			t.Fatalf("record %d: data differs", i)
		}
	}
	// Exactly once: no late duplicate produces a second completion.
	b.postRecords(t, 5000, count, 4)
	time.Sleep(300 * time.Millisecond)
	if got := b.rcq.Poll(); len(got) != 0 {
		t.Fatalf("extra record completions: %+v", got)
	}
	if d, u := link.counts(); d == 0 || u == 0 {
		t.Fatalf("the link did nothing: dropped %d duplicated %d", d, u)
	}
	ca, cb := rdCounters(t, path, a.qp.QPN), rdCounters(t, path, b.qp.QPN)
	if ca["rd_retransmits"] == 0 || cb["rd_dup"] == 0 || cb["wrec_complete"] != count || cb["wrec_trimmed"] != 0 ||
		cb["wrec_evicted"] != 0 {
		t.Errorf("counters: sender %v target %v", ca, cb)
	}
}

// TestRDWriteRecordAccessViolation: Write-Records the target refuses (bad
// STag, no RemoteWrite, out of bounds) complete at the sender with
// WCRemAccessErr and the Terminate's error in Term; nothing is placed and
// nothing completes at the target; both QPs stay up (a good Write-Record
// and a Send posted behind them complete).
func TestRDWriteRecordAccessViolation(t *testing.T) {
	srv, path := startRD(t, func(c *config.Config) { c.GSO = false })
	link := &lossyLink{drop: 9, dup: 13}
	link.install(srv)
	a := newRDNode(t, path, 1<<20, 0)
	b := newRDWrecTarget(t, path, 64<<10)
	noRW, err := b.c.RegMR(b.pd, 64<<10, proto.AccessLocalWrite)
	if err != nil {
		t.Fatal(err)
	}
	ah := a.ah(t, b.rdNode)
	pattern(a.mr.Buf[:20000], 1)
	cases := []struct {
		name string
		rkey uint32
		to   uint64
		size int
	}{
		{"bad stag", b.mr.RKey ^ 0x7f000000, b.mr.Addr(0), 5000},
		{"bounds after", b.mr.RKey, b.mr.Addr(64<<10 - 100), 5000},
		{"bounds before", b.mr.RKey, b.mr.Addr(0) - 1, 10},
		{"no remote write", noRW.RKey, noRW.Addr(0), 3000},
		{"bad stag again", b.mr.RKey ^ 0x7f000000, b.mr.Addr(0), 0},
	}
	b.postRecords(t, 500, 0, 1)
	// All posted at once, then a good Write-Record and a good Send.
	for i, tc := range cases {
		a.writeRecord(t, ah, uint64(i), tc.rkey, tc.to, 0, tc.size)
	}
	a.writeRecord(t, ah, 98, b.mr.RKey, b.mr.Addr(0), 0, 3000)
	b.postRecords(t, 600, 1, 1) // the receive for the Send
	a.post(t, proto.SQE{WRID: 99, Opcode: proto.WRSend, Flags: proto.SendSignaled, AH: ah}, []proto.SGE{a.mr.SGE(0, 10)})
	scs := waitN(t, a.scq, len(cases)+2, "sends")
	for i, tc := range cases {
		sc := scs[i]
		// Whatever the fault, a datagram QP answers with one generic error
		// (rnic/access_guard.go): a guesser cannot tell a bad STag from bounds.
		want := rnic.TermWord(rnic.DgramAccessError)
		if sc.WRID != uint64(i) || sc.Status != proto.WCRemAccessErr || sc.Opcode != proto.WCWriteRecord ||
			sc.Flags&proto.WCFlagTermValid == 0 || sc.Term != want {
			t.Fatalf("%s: completion %+v, want WCRemAccessErr term %#x", tc.name, sc, want)
		}
	}
	if sc := scs[len(cases)]; sc.WRID != 98 || sc.Status != proto.WCSuccess || sc.Opcode != proto.WCWriteRecord {
		t.Fatalf("good Write-Record: %+v", sc)
	}
	if sc := scs[len(cases)+1]; sc.WRID != 99 || sc.Status != proto.WCSuccess || sc.Opcode != proto.WCSend {
		t.Fatalf("good Send: %+v", sc)
	}
	rcs := waitN(t, b.rcq, 2, "record and receive")
	checkRecord(t, "good record", rcs[0], b, 0, 500, a.qp.Addr, b.mr.Addr(0), 3000)
	if rcs[1].WRID != 600 || rcs[1].Status != proto.WCSuccess || rcs[1].Opcode != proto.WCRecv || rcs[1].ByteLen != 10 {
		t.Fatalf("receive after the violations: %+v", rcs[1])
	}
	if !bytes.Equal(b.mr.Buf[:3000], a.mr.Buf[:3000]) {
		t.Fatal("good record not placed")
	}
	if !bytes.Equal(b.mr.Buf[3000:], make([]byte, 64<<10-3000)) || !bytes.Equal(noRW.Buf, make([]byte, 64<<10)) {
		t.Fatal("a refused segment was placed")
	}
	time.Sleep(50 * time.Millisecond)
	if got := b.rcq.Poll(); len(got) != 0 {
		t.Fatalf("extra target completions: %+v", got)
	}
	ca, cb := rdCounters(t, path, a.qp.QPN), rdCounters(t, path, b.qp.QPN)
	if ca["error_msgs_in"] != int64(len(cases)) || ca["rd_error_msgs_unmatched"] != 0 || cb["error_msgs_out"] != int64(len(cases)) ||
		cb["wrec_access_errors"] != int64(len(cases)) || cb["wrec_complete"] != 1 {
		t.Errorf("counters: sender %v target %v", ca, cb)
	}
}

// TestRDWriteRecordNotReady: a Write-Record to a target with no posted
// receive gets NOTREADY flow control like a Send (docs/rd.md): the data
// may be placed, but the record's last segment waits, unacknowledged, so
// neither side completes, and nothing is lost; once receives are posted
// every record completes, at both ends, in order.
func TestRDWriteRecordNotReady(t *testing.T) {
	_, path := startRD(t, nil)
	a := newRDNode(t, path, 1<<20, 0)
	b := newRDWrecTarget(t, path, 1<<20)
	ah := a.ah(t, b.rdNode)
	const count, slot = 3, 64 << 10
	for i := range count {
		pattern(a.mr.Buf[i*slot:(i+1)*slot], i)
		a.writeRecord(t, ah, uint64(i), b.mr.RKey, b.mr.Addr(i*slot), i*slot, slot)
	}
	// No receive at the target: NOTREADY goes back (bounded wait for the
	// counter, not a timing assertion), and nothing completes meanwhile.
	deadline := time.Now().Add(rdWait())
	for i := 0; rdCounters(t, path, b.qp.QPN)["rd_notready"] == 0; i++ {
		if i > 10000 || time.Now().After(deadline) {
			t.Fatalf("no NOTREADY sent: target %v", rdCounters(t, path, b.qp.QPN))
		}
		time.Sleep(5 * time.Millisecond)
	}
	if got := a.scq.Poll(); len(got) != 0 {
		t.Fatalf("send completions before the target posted a receive: %+v", got)
	}
	if got := b.rcq.Poll(); len(got) != 0 {
		t.Fatalf("record completions without a receive: %+v", got)
	}
	b.postRecords(t, 100, 0, count)
	scs := waitN(t, a.scq, count, "send")
	for i, sc := range scs {
		if sc.Status != proto.WCSuccess || sc.WRID != uint64(i) || sc.Opcode != proto.WCWriteRecord {
			t.Fatalf("send %d: %+v", i, sc)
		}
	}
	rcs := waitN(t, b.rcq, count, "record")
	for i, rc := range rcs {
		checkRecord(t, fmt.Sprint("record ", i), rc, b, i, uint64(100+i), a.qp.Addr, b.mr.Addr(i*slot), slot)
		if !bytes.Equal(b.mr.Buf[i*slot:(i+1)*slot], a.mr.Buf[i*slot:(i+1)*slot]) {
			t.Fatalf("record %d: data differs", i)
		}
	}
	if cb := rdCounters(t, path, b.qp.QPN); cb["wrec_no_recv"] != 0 || cb["wrec_complete"] != count {
		t.Errorf("target counters %v", cb)
	}
	if ca := rdCounters(t, path, a.qp.QPN); ca["rd_notready_received"] == 0 || ca["rd_retry_exceeded"] != 0 {
		t.Errorf("sender counters %v", ca)
	}
}
