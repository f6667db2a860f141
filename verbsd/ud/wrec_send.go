package ud

import (
	"github.com/iwarpd/iwarpd/ddp"
	"github.com/iwarpd/iwarpd/llp/dgram"
	"github.com/iwarpd/iwarpd/proto"
	"github.com/iwarpd/iwarpd/rdmap"
)

// The sending side of RDMA Write-Record (docs/write-record.md): one tagged
// DDP message, opcode 0xC, to the STag sqe.RKey at the tagged offset
// sqe.RemoteAddr of the peer named by the AH; every segment carries the
// 12-octet Write-Record header after its tagged DDP header. Its RecordID is
// the work request's MSN: the per-QP counter every message of the QP takes
// a value of (on RD: shared with Sends), so it is unique among the QP's
// outstanding messages to any destination and stable across the engine
// passes (and retransmissions) that send the message.
//
// On UD the message goes out by the same batched path as a Send
// (ud/send.go) and completes when its last datagram left. On RD
// (rd/send.go) its segments are DATA tokens like a Send's: the work request
// completes (WCWriteRecord) when every token is acknowledged, or with
// WCRemAccessErr and Term when the target answers with an error message
// (writeRecordError).

// WriteRecordSegments cuts a Write-Record message of total octets (RecordID
// msn) into tagged segments of at most maxPayload octets: opcode 0xC, or
// 0xD (Write-Record with Immediate) for WRWriteRecordWithImm. The error is
// the TO wrap of sqe.RemoteAddr + total.
func WriteRecordSegments(sqe *proto.SQE, msn uint32, total, maxPayload int) (ddp.Segmenter, rdmap.WriteRecord, error) {
	op := rdmap.OpWriteRecord
	if sqe.Opcode == proto.WRWriteRecordWithImm {
		op = rdmap.OpWriteRecordImm
	}
	segs, err := ddp.TaggedSegments(uint8(rdmap.MakeControl(op)), sqe.RKey, sqe.RemoteAddr, uint32(total), maxPayload)
	return segs, rdmap.WriteRecord{RecordID: msn, MessageLength: uint32(total)}, err
}

// WrecULPLen is the RDMAP header octets of a Write-Record segment of
// opcode op (WRWriteRecord or WRWriteRecordWithImm).
func WrecULPLen(op proto.SendOpcode) int {
	if op == proto.WRWriteRecordWithImm {
		return rdmap.WriteRecordImmLen
	}
	return rdmap.WriteRecordLen
}

// MaxPayloadWriteRecord is the payload octets of one Write-Record segment
// of opcode op in a UD datagram.
func (e *Engine) MaxPayloadWriteRecord(op proto.SendOpcode) int {
	return ddp.MaxPayload(dgram.MaxSegment(e.Cfg.DatagramSize, false), true, WrecULPLen(op))
}

// prepareWriteRecord finishes prepareSend for a Write-Record work request
// of total octets (already translated into wr.payloads).
func (e *Engine) prepareWriteRecord(wr *sendWR, sqe *proto.SQE, msn uint32, total int) proto.WCStatus {
	segs, rec, err := WriteRecordSegments(sqe, msn, total, e.MaxPayloadWriteRecord(sqe.Opcode))
	if err != nil { // TO + length wraps
		return proto.WCLocLenErr
	}
	wr.hasImm = sqe.Opcode == proto.WRWriteRecordWithImm // its Immediate Data follows rec (ud/send.go)
	wr.imm = rdmap.MakeImmediateData(sqe.Imm).Raw
	wr.msn, wr.total, wr.segs, wr.rec = msn, total, segs, rec
	wr.signaled = sqe.Flags&proto.SendSignaled != 0
	return proto.WCSuccess
}
