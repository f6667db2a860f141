package verbsd

import (
	"github.com/iwarpd/iwarpd/ddp"
	"github.com/iwarpd/iwarpd/llp/dgram"
	"github.com/iwarpd/iwarpd/proto"
	"github.com/iwarpd/iwarpd/rdmap"
)

// The sending side of RDMA Write-Record on UD (docs/write-record.md): one
// tagged DDP message, opcode 0xC, to the STag sqe.RKey at the tagged offset
// sqe.RemoteAddr of the peer named by the AH; every segment carries the
// 12-octet Write-Record header after its tagged DDP header. The message
// goes out by the same batched path as a Send (ud_send.go); its RecordID is
// the work request's MSN: the per-QP counter every message of the QP takes
// a value of, so it is unique among the QP's outstanding messages to any
// destination and stable across the engine passes that send the message.

// maxPayloadWriteRecord is the payload octets of one Write-Record segment
// in a UD datagram.
func (e *engine) maxPayloadWriteRecord() int {
	return ddp.MaxPayload(dgram.MaxSegment(e.cfg.DatagramSize, false), true, rdmap.WriteRecordLen)
}

// prepareWriteRecord finishes prepareSend for a Write-Record work request
// of total octets (already translated into wr.payloads).
func (e *engine) prepareWriteRecord(wr *sendWR, sqe *proto.SQE, a *ah, msn uint32, total int) proto.WCStatus {
	segs, err := ddp.TaggedSegments(uint8(rdmap.MakeControl(rdmap.OpWriteRecord)), sqe.RKey, sqe.RemoteAddr,
		uint32(total), e.maxPayloadWriteRecord())
	if err != nil { // TO + length wraps
		return proto.WCLocLenErr
	}
	wr.ah, wr.msn, wr.total, wr.segs = a, msn, total, segs
	wr.rec = rdmap.WriteRecord{RecordID: msn, MessageLength: uint32(total)}
	wr.signaled = sqe.Flags&proto.SendSignaled != 0
	return proto.WCSuccess
}
