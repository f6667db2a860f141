package main

import (
	"fmt"

	"github.com/iwarpd/iwarpd/ofverbs"
)

// RDMA Write-Record on datagram queue pairs (-t ud|rd -o write-record,
// docs/write-record.md). The send test loops (latClient, latServer,
// bwSender, bwReceiver) run unchanged: a data message is a Write-Record of
// the iteration's pattern into a slot of the peer's RDMA region instead of
// a Send, and its arrival is the record completion at the target's receive
// CQ, which consumed one posted receive and wrote the record (the placed
// ranges) into it. recv checks the record and hands the region slot the
// message was placed in to the loops, which check the data. Credits (bw)
// are Sends as for -o send.
//
// -o write-imm on UD and RD runs the same test with Write-Records with
// Immediate (WRWriteRecordWithImm): the value is immOf the message, and
// recv checks it (checkImm) in the record completion.
//
// Iteration k goes into peer slot k mod the peer's slots: 2 in lat (the
// peer checks one while the next arrives in the other), -window in bw (the
// sender is never more than a window ahead of the receiver's credit, which
// covers only messages already checked).

// sendWriteRecords posts the Write-Records of iterations first..first+n-1.
func (t *verbsTransport) sendWriteRecords(first uint64, n, size int) error {
	if t.peerBuf == nil || t.stride == 0 {
		return t.errorf("the peer exposed no region for -o write-record")
	}
	peerSlots := uint64(t.peerBuf.Len) / uint64(t.stride)
	if peerSlots == 0 {
		return t.errorf("the peer's %d-octet region holds no %d-octet slot", t.peerBuf.Len, t.stride)
	}
	for i := range n {
		iter := first + uint64(i)
		if err := t.setWrite(i, iter, size, int(iter%peerSlots)); err != nil {
			return err
		}
		t.swr[i].Opcode = ofverbs.WRWriteRecord
		if t.op == "write-imm" {
			t.swr[i].Opcode, t.swr[i].Imm = ofverbs.WRWriteRecordWithImm, immOf(t.pat.message(iter, size))
		}
	}
	if err := t.post(t.swr[:n]); err != nil {
		return fmt.Errorf("Write-Records of iterations %d..%d: %w", first, first+uint64(n)-1, err)
	}
	return nil
}

// wrecTest reports whether a test of op on queue pairs of type qpType
// moves its messages by Write-Record: -o write-record, and -o write-imm
// on UD and RD (Write-Record with Immediate; on RC it is RDMA Write with
// Immediate, atomic.go).
func wrecTest(op, qpType string) bool {
	return op == "write-record" || (op == "write-imm" && qpType != "rc")
}

// recordedMessage checks the record completion of the held receive slot —
// a Write-Record of size octets into this side's region with this region's
// STag, placed whole (one range {0, size}, no RecordTrim) at the start of
// a slot — and returns that slot's message.
func (t *verbsTransport) recordedMessage(size int) ([]byte, error) {
	wc := t.heldWC
	if err := checkRecord(wc, t.slot(t.held), size); err != nil {
		return nil, t.errorf("Write-Record: %w", err)
	}
	if t.regionMR == nil || wc.InvStag != t.regionMR.RKey() {
		return nil, t.errorf("Write-Record: record for STag %#x, not this test's region", wc.InvStag)
	}
	base := t.regionMR.Addr()
	off := wc.TO - base
	if wc.TO < base || off%uint64(t.stride) != 0 || off/uint64(t.stride) >= uint64(t.regionSlots) {
		return nil, t.errorf("Write-Record: placed at %#x, not at a slot of the region [%#x, +%d) (stride %d)",
			wc.TO, base, len(t.region), t.stride)
	}
	return t.regionSlot(int(off / uint64(t.stride)))[:size], nil
}

// checkRecord checks a record completion wc and its receive buffer rec
// against a whole message of size octets.
func checkRecord(wc ofverbs.WC, rec []byte, size int) error {
	if wc.Opcode != ofverbs.WCRecvWriteRecord {
		return fmt.Errorf("completion of opcode %v, want a Write-Record's", wc.Opcode)
	}
	if wc.ByteLen != uint32(size) {
		return fmt.Errorf("record of a %d-octet message, want %d", wc.ByteLen, size)
	}
	ranges, err := ofverbs.ParseRecord(rec)
	if err != nil {
		return err
	}
	if wc.Flags&ofverbs.WCFlagRecordTrim != 0 || len(ranges) != 1 || ranges[0] != (ofverbs.Range{Offset: 0, Length: uint32(size)}) {
		return fmt.Errorf("message not placed whole (datagrams lost?): ranges %v, trimmed %v",
			ranges, wc.Flags&ofverbs.WCFlagRecordTrim != 0)
	}
	return nil
}
