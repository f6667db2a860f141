package atomics

import (
	"bytes"
	"testing"

	"github.com/iwarpd/iwarpd/ofverbs"
)

// Write-Record with Immediate (ofverbs.WRWriteRecordWithImm; UD and RD,
// docs/write-record.md): the data lands in the target's region, and the
// target's record completion carries the value with WCFlagImm.

// wrecDataOff is where the Write-Records land in the server's buffer; the
// record receives use octets [0, wrecDataOff).
const wrecDataOff = 1024

// wrecImmediate sends Write-Records with Immediate of the given sizes (at
// most bufLen − wrecDataOff) from cli into srv's buffer, each followed by
// a plain Write-Record, and checks both ends: the sender's completions
// WCWriteRecord; the target's WCRecvWriteRecord with the source, STag,
// tagged offset, length, one whole range, and the value and WCFlagImm on
// the first only.
func wrecImmediate(t *testing.T, srv, cli *ep, sizes []int) {
	t.Helper()
	ah := cli.ahTo(t, srv.qp.Endpoint())
	for i, size := range sizes {
		for k := range size {
			cli.mem[k] = byte(k*29 + i + 1)
		}
		clear(srv.mem[wrecDataOff:])
		for k := range 2 {
			if err := srv.postRecv(uint64(100+2*i+k), 64*k, 64); err != nil {
				t.Fatal(err)
			}
		}
		imm := uint32(0x7e000000 + i)
		to := srv.addr(wrecDataOff)
		for k, op := range []ofverbs.SendOpcode{ofverbs.WRWriteRecordWithImm, ofverbs.WRWriteRecord} {
			if err := cli.post(ofverbs.SendWR{ID: uint64(2*i + k), Opcode: op, Signaled: true, Imm: imm, AH: ah,
				RKey: srv.mr.RKey(), RemoteAddr: to, SGL: []ofverbs.SGE{cli.mr.SGE(cli.mem[:size])}}); err != nil {
				t.Fatal(err)
			}
			if wc, err := cli.one(cli.scq); err != nil || wc.Err() != nil || wc.Opcode != ofverbs.WCWriteRecord ||
				wc.ID != uint64(2*i+k) || wc.ByteLen != uint32(size) {
				t.Fatalf("%v of %d bytes: send completion %+v (%v)", op, size, wc, err)
			}
			wc, err := srv.one(srv.rcq)
			if err != nil || wc.Err() != nil || wc.Opcode != ofverbs.WCRecvWriteRecord || wc.ID != uint64(100+2*i+k) ||
				wc.ByteLen != uint32(size) || wc.Src != cli.qp.Addr() || wc.InvStag != srv.mr.RKey() || wc.TO != to ||
				wc.Flags&ofverbs.WCFlagRecordTrim != 0 || (wc.Flags&ofverbs.WCFlagImm != 0) != (k == 0) || (k == 0 && wc.Imm != imm) {
				t.Fatalf("%v of %d bytes (imm %#x): record completion %+v (%v)", op, size, imm, wc, err)
			}
			ranges, err := ofverbs.ParseRecord(srv.mem[64*k : 64*(k+1)])
			if want := []ofverbs.Range{{Offset: 0, Length: uint32(size)}}; err != nil || (size > 0 && (len(ranges) != 1 || ranges[0] != want[0])) ||
				(size == 0 && len(ranges) != 0) {
				t.Fatalf("%v of %d bytes: record %+v (%v)", op, size, ranges, err)
			}
			if !bytes.Equal(srv.mem[wrecDataOff:wrecDataOff+size], cli.mem[:size]) || srv.mem[wrecDataOff+size] != 0 {
				t.Fatalf("%v of %d bytes: target data differs", op, size)
			}
		}
	}
}

// wrecImmRefused sends a Write-Record with Immediate into a region of
// srv's registered without remote write: nothing is placed and no record
// completes at the target (the receive posted first takes the good
// Write-Record with Immediate sent after it); on RD the sender's work
// request completes with WCRemAccessErr (on UD it completed when sent).
func wrecImmRefused(t *testing.T, srv, cli *ep, rd bool) {
	t.Helper()
	buf, err := srv.ctx.AllocBuffer(4096)
	if err != nil {
		t.Fatal(err)
	}
	noWrite, err := srv.pd.RegMR(buf.Bytes(), ofverbs.AccessLocalWrite|ofverbs.AccessRemoteRead)
	if err != nil {
		t.Fatal(err)
	}
	ah := cli.ahTo(t, srv.qp.Endpoint())
	if err := srv.postRecv(500, 0, 64); err != nil {
		t.Fatal(err)
	}
	for k := range 100 {
		cli.mem[k] = byte(k + 1)
	}
	if err := cli.post(ofverbs.SendWR{ID: 50, Opcode: ofverbs.WRWriteRecordWithImm, Signaled: true, Imm: 0xbad, AH: ah,
		RKey: noWrite.RKey(), RemoteAddr: noWrite.Addr(), SGL: []ofverbs.SGE{cli.mr.SGE(cli.mem[:100])}}); err != nil {
		t.Fatal(err)
	}
	wc, err := cli.one(cli.scq)
	switch {
	case err != nil:
		t.Fatal(err)
	case rd && (wc.Status != ofverbs.WCRemAccessErr || wc.Flags&ofverbs.WCFlagTermValid == 0):
		t.Fatalf("refused Write-Record with Immediate over RD: %+v, want a remote access error", wc)
	case !rd && wc.Err() != nil:
		t.Fatalf("Write-Record with Immediate over UD: %+v", wc)
	}
	if err := cli.post(ofverbs.SendWR{ID: 51, Opcode: ofverbs.WRWriteRecordWithImm, Signaled: true, Imm: 0x600d, AH: ah,
		RKey: srv.mr.RKey(), RemoteAddr: srv.addr(wrecDataOff), SGL: []ofverbs.SGE{cli.mr.SGE(cli.mem[:100])}}); err != nil {
		t.Fatal(err)
	}
	if wc, err := cli.one(cli.scq); err != nil || wc.Err() != nil || wc.ID != 51 {
		t.Fatalf("good Write-Record with Immediate: %+v (%v)", wc, err)
	}
	if wc, err := srv.one(srv.rcq); err != nil || wc.Err() != nil || wc.ID != 500 || wc.Flags&ofverbs.WCFlagImm == 0 || wc.Imm != 0x600d {
		t.Fatalf("the target's first record completion %+v (%v), want the good one's (imm 0x600d)", wc, err)
	}
	if !bytes.Equal(buf.Bytes(), make([]byte, 4096)) {
		t.Fatal("a refused Write-Record with Immediate placed data")
	}
}
