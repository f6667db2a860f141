package e2e

import (
	"bytes"
	"fmt"
	"net/netip"
	"sync"
	"testing"
	"time"

	"github.com/iwarpd/iwarpd/ddp"
	"github.com/iwarpd/iwarpd/internal/crc32c"
	"github.com/iwarpd/iwarpd/llp/dgram"
	"github.com/iwarpd/iwarpd/proto"
	"github.com/iwarpd/iwarpd/rdmap"
	"github.com/iwarpd/iwarpd/verbsd/config"
	"github.com/iwarpd/iwarpd/verbsd/rnic"
	"github.com/iwarpd/iwarpd/verbsd/ud"
	"github.com/iwarpd/iwarpd/verbsd/verbsdtest"
	"golang.org/x/sys/unix"
)

// Write-Record with Immediate (WRWriteRecordWithImm, RDMAP opcode 0xD;
// docs/write-record.md): the record completion at the target carries the
// value and WCFlagImm; a plain Write-Record's does not.

// checkImmRecord checks a record completion: success, the whole message,
// and the immediate value (hasImm) or none.
func checkImmRecord(t *testing.T, what string, rc proto.CQE, wrid uint64, stag uint32, to uint64, size int, hasImm bool, imm uint32) {
	t.Helper()
	gotImm := rc.Flags&proto.WCFlagImm != 0
	if rc.Status != proto.WCSuccess || rc.Opcode != proto.WCRecvWriteRecord || rc.WRID != wrid || int(rc.ByteLen) != size ||
		rc.InvStag != stag || rc.TO != to || rc.Flags&proto.WCFlagRecordTrim != 0 || gotImm != hasImm || (hasImm && rc.Imm != imm) {
		t.Fatalf("%s: record completion %+v, want wrid %d len %d imm %v %#x", what, rc, wrid, size, hasImm, imm)
	}
}

// TestWriteRecordImmUD: Write-Records with Immediate of one and several
// datagrams over UD, posted in one batch between a Send with Immediate and
// a plain Write-Record (so a work-request slot reused across opcodes keeps
// nothing of the previous one): data placed, the value in the record
// completion, the sender's completion WCWriteRecord.
func TestWriteRecordImmUD(t *testing.T) {
	_, path := startFast(t, nil)
	a := newFastNode(t, path, 1<<20)
	b := newWrecTarget(t, path, 1<<20, proto.AccessLocalWrite|proto.AccessRemoteWrite)
	ah, err := a.c.CreateAH(a.pd, b.qp.Addr)
	if err != nil {
		t.Fatal(err)
	}
	seg := ddp.MaxPayload(dgram.MaxSegment(config.DefaultConfig().DatagramSize, false), true, rdmap.WriteRecordImmLen)
	sizes := []int{0, 1, seg, seg + 1, 100000}
	pattern(a.mr.Buf[:200000], 3)
	for round, size := range sizes {
		// A Send with Immediate, a Write-Record with Immediate, a plain
		// Write-Record — in the reverse order every other round, so that
		// the engine's work-request slots change opcodes — into three
		// receives.
		for k := range 3 {
			if err := b.c.PostRecv(b.qp.RQ, uint64(10*round+k), []proto.SGE{b.mr.SGE(k*4096, 4096)}); err != nil {
				t.Fatal(err)
			}
		}
		clear(b.tgt.Buf)
		imm := uint32(0xc0de0000 + round)
		wrs := []proto.SQE{
			{WRID: 1, Opcode: proto.WRSendWithImm, Flags: proto.SendSignaled, AH: ah, Imm: 0x5e5e5e5e},
			{WRID: 2, Opcode: proto.WRWriteRecordWithImm, Flags: proto.SendSignaled, AH: ah, RKey: b.tgt.RKey,
				RemoteAddr: b.tgt.Addr(3), Imm: imm},
			{WRID: 3, Opcode: proto.WRWriteRecord, Flags: proto.SendSignaled, AH: ah, RKey: b.tgt.RKey,
				RemoteAddr: b.tgt.Addr(500000)},
		}
		sges := [][]proto.SGE{{a.mr.SGE(0, 16)}, {a.mr.SGE(0, size)}, {a.mr.SGE(0, size)}}
		order := []int{0, 1, 2}
		if round%2 == 1 {
			order = []int{2, 1, 0}
		}
		for _, i := range order {
			if err := a.qp.PostSend(wrs[i], sges[i], nil); err != nil {
				t.Fatal(err)
			}
		}
		scs := waitN(t, a.scq, 3, "sends")
		rcs := waitN(t, b.rcq, 3, "receives")
		what := fmt.Sprint("size ", size)
		for k, i := range order {
			sc, rc, wrid := scs[k], rcs[k], uint64(10*round+k)
			wantOp := proto.WCWriteRecord
			if i == 0 {
				wantOp = proto.WCSend
			}
			if sc.Status != proto.WCSuccess || sc.Opcode != wantOp || sc.WRID != wrs[i].WRID {
				t.Fatalf("%s: send completion %d: %+v", what, k, sc)
			}
			switch i {
			case 0:
				if rc.Status != proto.WCSuccess || rc.Opcode != proto.WCRecv || rc.ByteLen != 16 || rc.WRID != wrid ||
					rc.Flags&proto.WCFlagImm == 0 || rc.Imm != 0x5e5e5e5e {
					t.Fatalf("%s: Send with Immediate: %+v", what, rc)
				}
			case 1:
				checkImmRecord(t, what, rc, wrid, b.tgt.RKey, b.tgt.Addr(3), size, true, imm)
			case 2:
				checkImmRecord(t, what+" (plain)", rc, wrid, b.tgt.RKey, b.tgt.Addr(500000), size, false, 0)
			}
		}
		if !bytes.Equal(b.tgt.Buf[3:3+size], a.mr.Buf[:size]) || !bytes.Equal(b.tgt.Buf[500000:500000+size], a.mr.Buf[:size]) {
			t.Fatalf("%s: target data differs", what)
		}
		if b.tgt.Buf[2] != 0 || b.tgt.Buf[3+size] != 0 || b.tgt.Buf[500000+size] != 0 {
			t.Fatalf("%s: octets around the records written", what)
		}
	}
	if c := qpStats(t, path, b.qp.QPN); c["wrec_complete"] != int64(2*len(sizes)) || c["wrec_dropped"] != 0 {
		t.Errorf("target counters: %v", c)
	}
}

// TestWriteRecordImmUDNoRemoteWrite: a Write-Record with Immediate to a
// region without RemoteWrite: nothing placed, no completion (with or
// without the value) at the target, an error message to the sender; then
// a good one completes with its value.
func TestWriteRecordImmUDNoRemoteWrite(t *testing.T) {
	_, path := startFast(t, nil)
	a := newFastNode(t, path, 1<<20)
	b := newWrecTarget(t, path, 64<<10, proto.AccessLocalWrite|proto.AccessRemoteWrite)
	noRW, err := b.c.RegMR(b.pd, 64<<10, proto.AccessLocalWrite|proto.AccessRemoteRead)
	if err != nil {
		t.Fatal(err)
	}
	ah, err := a.c.CreateAH(a.pd, b.qp.Addr)
	if err != nil {
		t.Fatal(err)
	}
	if err := b.c.PostRecv(b.qp.RQ, 7, []proto.SGE{b.mr.SGE(0, 64)}); err != nil {
		t.Fatal(err)
	}
	pattern(a.mr.Buf[:5000], 9)
	for i, size := range []int{10, 5000} {
		if err := a.qp.PostSend(proto.SQE{WRID: uint64(i), Opcode: proto.WRWriteRecordWithImm, Flags: proto.SendSignaled, AH: ah,
			RKey: noRW.RKey, RemoteAddr: noRW.Addr(0), Imm: 0xbad}, []proto.SGE{a.mr.SGE(0, size)}, nil); err != nil {
			t.Fatal(err)
		}
		if sc := waitN(t, a.scq, 1, "send")[0]; sc.Status != proto.WCSuccess || sc.Opcode != proto.WCWriteRecord {
			t.Fatalf("send %d: %+v", i, sc)
		}
		deadline := time.Now().Add(rdWait())
		for n := 0; qpStats(t, path, a.qp.QPN)["error_msgs_in"] < int64(i+1); n++ {
			if n > 100000 || time.Now().After(deadline) {
				t.Fatalf("no error message reached the sender: %v", qpStats(t, path, a.qp.QPN))
			}
			time.Sleep(time.Millisecond)
		}
	}
	// The good record behind them completes into the receive the refused
	// ones did not take.
	if err := a.qp.PostSend(proto.SQE{WRID: 9, Opcode: proto.WRWriteRecordWithImm, Flags: proto.SendSignaled, AH: ah,
		RKey: b.tgt.RKey, RemoteAddr: b.tgt.Addr(0), Imm: 0x600d}, []proto.SGE{a.mr.SGE(0, 3000)}, nil); err != nil {
		t.Fatal(err)
	}
	waitN(t, a.scq, 1, "good send")
	checkImmRecord(t, "good record", waitN(t, b.rcq, 1, "good record")[0], 7, b.tgt.RKey, b.tgt.Addr(0), 3000, true, 0x600d)
	if !bytes.Equal(noRW.Buf, make([]byte, 64<<10)) {
		t.Fatal("a refused Write-Record with Immediate placed data")
	}
	if got := b.rcq.Poll(); len(got) != 0 {
		t.Fatalf("extra target completions: %+v", got)
	}
	if cb := qpStats(t, path, b.qp.QPN); cb["wrec_access_errors"] < 2 || cb["wrec_complete"] != 1 || cb["error_msgs_out"] != 2 {
		t.Errorf("target counters: %v", cb)
	}
}

// TestWriteRecordImmUDInconsistent: hand-made datagrams from a raw
// socket. A segment shorter than its two headers is dropped; a segment
// whose Immediate Data (or opcode) differs from its record's first is
// dropped as inconsistent, so the record completes — trimmed, after the
// reassembly timeout — with the value of its first segment only.
func TestWriteRecordImmUDInconsistent(t *testing.T) {
	_, path := startFast(t, func(c *config.Config) { c.ReassemblyTimeout = 20 * time.Millisecond })
	b := newWrecTarget(t, path, 8192, proto.AccessLocalWrite|proto.AccessRemoteWrite)
	if err := b.c.PostRecv(b.qp.RQ, 1, []proto.SGE{b.mr.SGE(0, 64)}); err != nil {
		t.Fatal(err)
	}
	dst, err := netip.ParseAddrPort(b.qp.Addr)
	if err != nil {
		t.Fatal(err)
	}
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { unix.Close(fd) })
	send := func(op rdmap.Opcode, last bool, to uint64, mo uint32, imm uint32, payload []byte, cut int) {
		t.Helper()
		h := ddp.Header{Tagged: true, Last: last, Version: ddp.Version, ULPControl: uint8(rdmap.MakeControl(op)),
			Stag: b.tgt.RKey, TO: to}
		d := h.Append(dgram.Keys{QKey: verbsdtest.TestQKey, SrcQKey: 1}.Append(nil))
		w := rdmap.WriteRecordImm{WriteRecord: rdmap.WriteRecord{RecordID: 5, MessageLength: 8, MessageOffset: mo},
			Imm: rdmap.MakeImmediateData(imm)}
		if op == rdmap.OpWriteRecordImm {
			d = w.Append(d)
		} else {
			d = w.WriteRecord.Append(d)
		}
		d = append(d, payload...)
		d = d[:len(d)-cut]
		d = crc32c.Append(d, crc32c.Checksum(d))
		if err := unix.Sendto(fd, d, 0, rnic.AddrToSockaddr(dst)); err != nil {
			t.Fatal(err)
		}
	}
	waitCounter := func(name string, want int64) {
		t.Helper()
		deadline := time.Now().Add(rdWait())
		for n := 0; qpStats(t, path, b.qp.QPN)[name] < want; n++ {
			if n > 100000 || time.Now().After(deadline) {
				t.Fatalf("%s stays below %d: %v", name, want, qpStats(t, path, b.qp.QPN))
			}
			time.Sleep(time.Millisecond)
		}
	}
	base := b.tgt.Addr(16)
	// 0xD without room for its Immediate Data (26 + 4 octets): truncated.
	send(rdmap.OpWriteRecordImm, true, base, 0, 1, nil, 4)
	waitCounter("drop_truncated", 1)
	send(rdmap.OpWriteRecordImm, false, base, 0, 0x11, []byte("abcd"), 0) // the record's first half, value 0x11
	waitCounter("wrec_segments_placed", 1)
	send(rdmap.OpWriteRecordImm, true, base+4, 4, 0x22, []byte("efgh"), 0) // another value: dropped
	waitCounter("wrec_dropped", 1)
	send(rdmap.OpWriteRecord, true, base+4, 4, 0, []byte("EFGH"), 0) // no value at all: dropped
	waitCounter("wrec_dropped", 2)
	rc := waitN(t, b.rcq, 1, "trimmed record")[0]
	if rc.Status != proto.WCSuccess || rc.Opcode != proto.WCRecvWriteRecord || rc.Flags&proto.WCFlagRecordTrim == 0 ||
		rc.Flags&proto.WCFlagImm == 0 || rc.Imm != 0x11 || rc.ByteLen != 8 || rc.TO != base {
		t.Fatalf("record completion %+v, want trimmed with imm 0x11", rc)
	}
	if got := parseRecord(t, b.mr.Buf); !equalRanges(got, []wrange{{0, 4}}) {
		t.Fatalf("record %v, want [{0 4}]", got)
	}
	if !bytes.Equal(b.tgt.Buf[16:24], []byte("abcd\x00\x00\x00\x00")) {
		t.Fatalf("target %q", b.tgt.Buf[16:24])
	}
}

// TestRDWriteRecordImm: Write-Records with Immediate over RD through a
// link that drops, duplicates and reorders: every record completes once,
// whole, with its value; then one to a region without RemoteWrite fails
// at the sender (WCRemAccessErr) and produces no completion at the target.
func TestRDWriteRecordImm(t *testing.T) {
	srv, path := startRD(t, func(c *config.Config) { c.GSO = false })
	link := &lossyLink{drop: 5, dup: 11, reorder: 7}
	link.install(srv)
	a := newRDNode(t, path, 1<<20, 0)
	b := newRDWrecTarget(t, path, 1<<20)
	noRW, err := b.c.RegMR(b.pd, 64<<10, proto.AccessLocalWrite)
	if err != nil {
		t.Fatal(err)
	}
	ah := a.ah(t, b.rdNode)
	seg := ddp.MaxPayload(dgram.MaxSegment(config.DefaultConfig().DatagramSize, true), true, rdmap.WriteRecordImmLen)
	sizes := []int{0, 1, seg, seg + 1, 5*seg + 3, 200000}
	b.postRecords(t, 100, 0, len(sizes)+1)
	off := 0
	for i, size := range sizes {
		pattern(a.mr.Buf[off:off+size], i)
		a.post(t, proto.SQE{WRID: uint64(i), Opcode: proto.WRWriteRecordWithImm, Flags: proto.SendSignaled, AH: ah,
			RKey: b.mr.RKey, RemoteAddr: b.mr.Addr(off), Imm: 0xab000000 + uint32(i)}, []proto.SGE{a.mr.SGE(off, size)})
		off += size + 64
	}
	// A plain one last: no value.
	a.post(t, proto.SQE{WRID: 50, Opcode: proto.WRWriteRecord, Flags: proto.SendSignaled, AH: ah, RKey: b.mr.RKey,
		RemoteAddr: b.mr.Addr(off)}, []proto.SGE{a.mr.SGE(0, 100)})
	scs := waitN(t, a.scq, len(sizes)+1, "sends")
	for i, sc := range scs {
		if sc.Status != proto.WCSuccess || sc.Opcode != proto.WCWriteRecord {
			t.Fatalf("send %d: %+v", i, sc)
		}
	}
	rcs := waitN(t, b.rcq, len(sizes)+1, "records")
	off = 0
	for i, size := range sizes {
		checkImmRecord(t, fmt.Sprint("size ", size), rcs[i], uint64(100+i), b.mr.RKey, b.mr.Addr(off), size, true, 0xab000000+uint32(i))
		if !bytes.Equal(b.mr.Buf[off:off+size], a.mr.Buf[off:off+size]) {
			t.Fatalf("size %d: data differs", size)
		}
		off += size + 64
	}
	checkImmRecord(t, "plain", rcs[len(sizes)], uint64(100+len(sizes)), b.mr.RKey, b.mr.Addr(off), 100, false, 0)
	time.Sleep(50 * time.Millisecond) // not a synchronisation: a second completion would be there by now
	if got := b.rcq.Poll(); len(got) != 0 {
		t.Fatalf("a record completed twice: %+v", got)
	}
	// Refused: the sender's work request fails, the target sees nothing.
	link.mu.Lock()
	link.off = true
	link.mu.Unlock()
	b.postRecords(t, 200, 0, 1)
	a.post(t, proto.SQE{WRID: 60, Opcode: proto.WRWriteRecordWithImm, Flags: proto.SendSignaled, AH: ah, RKey: noRW.RKey,
		RemoteAddr: noRW.Addr(0), Imm: 0xbad}, []proto.SGE{a.mr.SGE(0, 3000)})
	if sc := waitN(t, a.scq, 1, "refused")[0]; sc.WRID != 60 || sc.Status != proto.WCRemAccessErr || sc.Opcode != proto.WCWriteRecord ||
		sc.Flags&proto.WCFlagTermValid == 0 || sc.Term != rnic.TermWord(rnic.DgramAccessError) {
		t.Fatalf("refused Write-Record with Immediate: %+v", sc)
	}
	time.Sleep(50 * time.Millisecond) // as above
	if got := b.rcq.Poll(); len(got) != 0 || !bytes.Equal(noRW.Buf, make([]byte, 64<<10)) {
		t.Fatalf("a refused Write-Record with Immediate completed (%+v) or placed data at the target", got)
	}
	// Both QPs still serve: the receive posted for it takes a good one.
	a.post(t, proto.SQE{WRID: 61, Opcode: proto.WRWriteRecordWithImm, Flags: proto.SendSignaled, AH: ah, RKey: b.mr.RKey,
		RemoteAddr: b.mr.Addr(0), Imm: 7}, []proto.SGE{a.mr.SGE(0, 10)})
	waitN(t, a.scq, 1, "good send")
	checkImmRecord(t, "after the refusal", waitN(t, b.rcq, 1, "good record")[0], 200, b.mr.RKey, b.mr.Addr(0), 10, true, 7)
}

// TestWriteRecordImmWireBytes: the datagrams the engine sends for a UD
// Write-Record with Immediate of three segments are byte for byte what
// llp/dgram and rdmap encode from docs/wire-format.md §8.1 (the golden
// ud-write-record-imm's layout): key header, tagged DDP header with
// opcode 0xD, Write-Record header, the Immediate Data, the payload, CRC.
func TestWriteRecordImmWireBytes(t *testing.T) {
	srv, path := startFast(t, func(c *config.Config) { c.GSO = false })
	var mu sync.Mutex
	var sent [][]byte
	setSendmmsg(srv, func(fd int, msgs []unix.Mmsghdr) (int, error) { // engines_internal_test.go
		mu.Lock()
		for i := range msgs {
			var d []byte
			for k := range int(msgs[i].Hdr.Iovlen) {
				d = append(d, iovBytes(&msgs[i].Hdr, k)...)
			}
			sent = append(sent, d)
		}
		mu.Unlock()
		return ud.SysSendmmsg(fd, msgs)
	})
	a := newFastNode(t, path, 1<<16)
	b := newWrecTarget(t, path, 1<<16, proto.AccessLocalWrite|proto.AccessRemoteWrite)
	ah, err := a.c.CreateAH(a.pd, b.qp.Addr)
	if err != nil {
		t.Fatal(err)
	}
	if err := b.c.PostRecv(b.qp.RQ, 1, []proto.SGE{b.mr.SGE(0, 64)}); err != nil {
		t.Fatal(err)
	}
	const size = 3000
	pattern(a.mr.Buf[:size], 4)
	to := b.tgt.Addr(100)
	if err := a.qp.PostSend(proto.SQE{WRID: 1, Opcode: proto.WRWriteRecordWithImm, Flags: proto.SendSignaled, AH: ah,
		RKey: b.tgt.RKey, RemoteAddr: to, Imm: 0xcafef00d}, []proto.SGE{a.mr.SGE(0, size)}, nil); err != nil {
		t.Fatal(err)
	}
	waitN(t, a.scq, 1, "send")
	checkImmRecord(t, "record", waitN(t, b.rcq, 1, "record")[0], 1, b.tgt.RKey, to, size, true, 0xcafef00d)
	per := ddp.MaxPayload(dgram.MaxSegment(config.DefaultConfig().DatagramSize, false), true, rdmap.WriteRecordImmLen)
	keys := dgram.Keys{QKey: verbsdtest.TestQKey, SrcQKey: verbsdtest.TestQKey}
	mu.Lock()
	defer mu.Unlock()
	var want [][]byte
	for off := 0; off < size; off += per {
		end := min(off+per, size)
		h := ddp.Header{Tagged: true, Last: end == size, Version: ddp.Version, ULPControl: uint8(rdmap.MakeControl(rdmap.OpWriteRecordImm)),
			Stag: b.tgt.RKey, TO: to + uint64(off)}
		w := rdmap.WriteRecordImm{WriteRecord: rdmap.WriteRecord{RecordID: 1, MessageLength: size, MessageOffset: uint32(off)},
			Imm: rdmap.MakeImmediateData(0xcafef00d)}
		want = append(want, dgram.AppendUD(nil, keys, true, h.Append(nil), w.Append(nil), a.mr.Buf[off:end]))
	}
	if len(sent) != len(want) {
		t.Fatalf("%d datagrams sent, want %d", len(sent), len(want))
	}
	for i := range want {
		if !bytes.Equal(sent[i], want[i]) {
			t.Fatalf("datagram %d:\n got % x\nwant % x", i, sent[i][:min(len(sent[i]), 64)], want[i][:min(len(want[i]), 64)])
		}
	}
}
