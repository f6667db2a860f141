package rd

import (
	"encoding/binary"
	"strings"
	"testing"

	"github.com/iwarpd/iwarpd/proto"
)

// rankReq writes request entry k as a rank that sent it would.
func rankReq(page []byte, k int, kind, slot, msn, id, n uint32, to uint64) {
	e := page[proto.FPRDReqOff(k):]
	le := binary.LittleEndian
	le.PutUint32(e[proto.OffFPRDReqState:], proto.FPRDReqSent)
	le.PutUint32(e[proto.OffFPRDReqKind:], kind)
	le.PutUint32(e[proto.OffFPRDReqSlot:], slot)
	le.PutUint32(e[proto.OffFPRDReqMSN:], msn)
	le.PutUint32(e[proto.OffFPRDReqID:], id)
	le.PutUint32(e[proto.OffFPRDReqLenW:], n)
	le.PutUint64(e[proto.OffFPRDReqSinkTO:], to)
}

// TestFastpathImportReqs: the rank's outstanding Reads and atomics come
// back oldest first with the peer of their slot; a resolved entry stays
// the rank's; MSNs wrap in serial order.
func TestFastpathImportReqs(t *testing.T) {
	e := fpEndpoint(t)
	page, x := fpExportOne(t, e)
	exp := []fpExported{*x}
	var base uint32 = 0xfffffffe
	rankReq(page, 3, proto.FPRDReqAtomic, 0, base+3, 77, 8, 0)
	rankReq(page, 0, proto.FPRDReqRead, 0, base+1, 5, 8, 0x1000)
	rankReq(page, 5, proto.FPRDReqRead, 0, base+2, 5, proto.FPRDCopyLen, 0x2000)
	rankReq(page, 6, proto.FPRDReqRead, 0, base+4, 5, 8, 0x3000)
	binary.LittleEndian.PutUint32(page[proto.FPRDReqOff(6)+proto.OffFPRDReqState:], proto.FPRDReqDone)
	reqs, err := fpImportReqs(page, exp, base, base+4)
	if err != nil {
		t.Fatal(err)
	}
	if len(reqs) != 3 || reqs[0].k != 0 || reqs[1].k != 5 || reqs[2].k != 3 {
		t.Fatalf("imported %+v, want entries 0, 5, 3 (MSN order)", reqs)
	}
	for _, r := range reqs {
		if r.peer != fpPeer {
			t.Fatalf("entry %d: peer %v, want %v", r.k, r.peer, fpPeer)
		}
	}
	if reqs[1].len != proto.FPRDCopyLen || reqs[1].to != 0x2000 || reqs[2].id != 77 {
		t.Fatalf("fields: %+v", reqs)
	}
}

// TestFastpathImportReqsHostile: every entry a rank could lie in fails
// the import (the QP), and nothing it names is used: the engine writes a
// response only into the entry's own data area of the page, so no sink
// address — inside or outside the QP's PD's regions — is ever imported.
func TestFastpathImportReqsHostile(t *testing.T) {
	e := fpEndpoint(t)
	_, x := fpExportOne(t, e)
	exp := []fpExported{*x}
	cases := []struct {
		name string
		set  func(page []byte)
		want string
	}{
		{"state", func(p []byte) {
			binary.LittleEndian.PutUint32(p[proto.FPRDReqOff(1)+proto.OffFPRDReqState:], 9)
		}, "State 9"},
		{"slot", func(p []byte) { rankReq(p, 0, proto.FPRDReqRead, 1, 11, 5, 8, 0) }, "Slot 1"},
		{"slot huge", func(p []byte) { rankReq(p, 0, proto.FPRDReqRead, 0xffffffff, 11, 5, 8, 0) }, "Slot 4294967295"},
		{"kind", func(p []byte) { rankReq(p, 2, 7, 0, 11, 5, 8, 0) }, "Kind 7"},
		{"read empty", func(p []byte) { rankReq(p, 0, proto.FPRDReqRead, 0, 11, 5, 0, 0) }, "a Read of 0 octets"},
		{"read beyond the data area", func(p []byte) {
			rankReq(p, 7, proto.FPRDReqRead, 0, 11, 5, proto.FPRDCopyLen+1, 0)
		}, "a Read of 2049 octets"},
		{"atomic length", func(p []byte) { rankReq(p, 0, proto.FPRDReqAtomic, 0, 11, 5, 4096, 0) }, "an atomic of 4096 octets"},
		{"msn exported", func(p []byte) { rankReq(p, 0, proto.FPRDReqRead, 0, 10, 5, 8, 0) }, "MSN 10"},
		{"msn behind", func(p []byte) { rankReq(p, 0, proto.FPRDReqRead, 0, 3, 5, 8, 0) }, "MSN 3"},
		{"msn ahead", func(p []byte) { rankReq(p, 0, proto.FPRDReqAtomic, 0, 13, 5, 8, 0) }, "MSN 13"},
		{"msn twice", func(p []byte) {
			rankReq(p, 0, proto.FPRDReqRead, 0, 11, 5, 8, 0)
			rankReq(p, 4, proto.FPRDReqAtomic, 0, 11, 5, 8, 0)
		}, "both MSN 11"},
	}
	for _, c := range cases {
		page := make([]byte, proto.FastpathRDPageLen)
		fpExportSlot(page, 0, x)
		c.set(page)
		reqs, err := fpImportReqs(page, exp, 10, 12)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: imported %+v, err %v; want an error naming %q", c.name, reqs, err, c.want)
		}
	}
	if _, err := fpImportReqs(make([]byte, proto.FastpathRDPageLen-1), exp, 10, 12); err == nil {
		t.Error("a short page was accepted")
	}
}
