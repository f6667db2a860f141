package rdmap

import (
	"encoding/binary"
	"errors"
	"fmt"
)

// ErrWriteRecordTruncated is returned by ParseWriteRecord when fewer than
// WriteRecordLen octets are given.
var ErrWriteRecordTruncated = errors.New("rdmap: truncated Write-Record header")

// WriteRecord is the RDMA Write-Record header of the iwarpd datagram profile
// (docs/wire-format.md §"Write-Record"; not an RFC format). It follows the
// 14-octet tagged DDP header of every segment whose RDMAP opcode is
// OpWriteRecord (0xC), and precedes the payload:
//
//	 0                   1                   2                   3
//	 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|                           Record ID                           |
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|                        Message Length                         |
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|                        Message Offset                         |
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//
// The DDP header's STag and TO place the segment's payload as in RFC 5041
// §4.2. RecordID names the message among those the source QP sends to one
// STag, so the target groups segments into one record; MessageLength is the
// whole message's length; MessageOffset is this segment's payload offset in
// the message, so the message starts at TO − MessageOffset. All big-endian.
type WriteRecord struct {
	RecordID      uint32
	MessageLength uint32
	MessageOffset uint32
}

// Len returns WriteRecordLen.
func (w *WriteRecord) Len() int { return WriteRecordLen }

// Append appends the 12-octet wire form of w to b.
func (w *WriteRecord) Append(b []byte) []byte {
	b = binary.BigEndian.AppendUint32(b, w.RecordID)
	b = binary.BigEndian.AppendUint32(b, w.MessageLength)
	return binary.BigEndian.AppendUint32(b, w.MessageOffset)
}

// WriteRecordImm is the header of a Write-Record with Immediate segment
// (OpWriteRecordImm, 0xD; docs/wire-format.md §8.1, iwarpd profile): the
// Write-Record header, then the 8 octets of RFC 7306 Immediate Data
// (§4.6's layout: the 32-bit verbs value in octets 0–3), in every segment
// of the message, before its payload:
//
//	 0                   1                   2                   3
//	 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|                           Record ID                           |
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|                        Message Length                         |
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|                        Message Offset                         |
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|                  Immediate Data (octets 0-3)                  |
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|                  Immediate Data (octets 4-7)                  |
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//
// Carrying the value in every segment (as the datagram Send with
// Immediate does) lets a UD target report it even when the first segment
// was lost.
type WriteRecordImm struct {
	WriteRecord
	Imm ImmediateData
}

// Len returns WriteRecordImmLen (20).
func (w *WriteRecordImm) Len() int { return WriteRecordImmLen }

// Append appends the 20-octet wire form of w to b.
func (w *WriteRecordImm) Append(b []byte) []byte {
	b = w.WriteRecord.Append(b)
	return w.Imm.Append(b)
}

// ParseWriteRecordImm decodes the Write-Record with Immediate header at the
// start of b and returns it with its length. It checks only the length.
func ParseWriteRecordImm(b []byte) (WriteRecordImm, int, error) {
	if len(b) < WriteRecordImmLen {
		return WriteRecordImm{}, 0, fmt.Errorf("%w: have %d bytes, need %d (with Immediate Data)", ErrWriteRecordTruncated, len(b), WriteRecordImmLen)
	}
	wr, _, _ := ParseWriteRecord(b)
	imm, _, _ := ParseImmediateData(b[WriteRecordLen:])
	return WriteRecordImm{WriteRecord: wr, Imm: imm}, WriteRecordImmLen, nil
}

// ParseWriteRecord decodes the Write-Record header at the start of b (the
// octets right after the tagged DDP header) and returns it with its length.
// It checks only the length; whether the segment lies inside the message
// (MessageOffset + payload ≤ MessageLength) is the receive path's check.
func ParseWriteRecord(b []byte) (WriteRecord, int, error) {
	if len(b) < WriteRecordLen {
		return WriteRecord{}, 0, fmt.Errorf("%w: have %d bytes, need %d", ErrWriteRecordTruncated, len(b), WriteRecordLen)
	}
	return WriteRecord{
		RecordID:      binary.BigEndian.Uint32(b[0:4]),
		MessageLength: binary.BigEndian.Uint32(b[4:8]),
		MessageOffset: binary.BigEndian.Uint32(b[8:12]),
	}, WriteRecordLen, nil
}
