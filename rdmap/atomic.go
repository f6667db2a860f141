package rdmap

import (
	"encoding/binary"
	"errors"
	"fmt"
)

// Errors of the RFC 7306 header codecs.
var (
	ErrAtomicRequestTruncated  = errors.New("rdmap: truncated Atomic Request header")
	ErrAtomicResponseTruncated = errors.New("rdmap: truncated Atomic Response header")
	ErrImmediateDataTruncated  = errors.New("rdmap: truncated Immediate Data")
)

// AtomicOp is the 4-bit Atomic Operation code of an Atomic Request
// (RFC 7306 §5.2.1; Wireshark's iwarp_rdma.atomic.opcode names 0 FetchAdd
// and 2 CmpSwap).
type AtomicOp uint8

const (
	AtomicFetchAdd AtomicOp = 0x0 // add Add Data (split by Add Mask), return the original
	AtomicSwap     AtomicOp = 0x1 // store Swap Data under Swap Mask, return the original
	AtomicCmpSwap  AtomicOp = 0x2 // if (original^Compare Data)&Compare Mask == 0, Swap; return the original
	atomicOpMask            = 0x0f
)

func (op AtomicOp) String() string {
	switch op {
	case AtomicFetchAdd:
		return "FetchAdd"
	case AtomicSwap:
		return "Swap"
	case AtomicCmpSwap:
		return "CmpSwap"
	}
	return fmt.Sprintf("atomic op 0x%x", uint8(op))
}

// Valid reports whether op is one of the defined operations.
func (op AtomicOp) Valid() bool { return op <= AtomicCmpSwap }

// AtomicRequest is the RFC 7306 Atomic Request header: the whole payload
// of an untagged DDP message on QN 1 (QNReadRequest, shared with RDMA Read
// Requests and counted against the responder's IRD) with RDMAP opcode
// OpAtomicRequest, one segment. All fields big-endian.
//
//	 0                   1                   2                   3
//	 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|                 Reserved (Not Used)                   |AOpCode|
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|                      Request Identifier                       |
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|                          Remote STag                          |
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|                 Remote Tagged Offset (64 bits)                |
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|                  Add or Swap Data (64 bits)                   |
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|                  Add or Swap Mask (64 bits)                   |
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|                    Compare Data (64 bits)                     |
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|                    Compare Mask (64 bits)                     |
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//
// 52 octets (AtomicRequestLen), the layout Wireshark 4.0 dissects. The
// target is the 8 octets at Remote STag / Remote Tagged Offset, which must
// be 8-octet aligned. Unmasked operations as sent by iwarpd: FetchAdd with
// Add Mask 0 (one 64-bit adder), CmpSwap with both masks all ones.
type AtomicRequest struct {
	Reserved    uint32 // the 28 reserved bits (sent as 0)
	Op          AtomicOp
	ReqID       uint32
	Stag        uint32
	TO          uint64
	AddSwap     uint64
	AddSwapMask uint64
	Compare     uint64
	CompareMask uint64
}

// Len returns AtomicRequestLen (52).
func (r *AtomicRequest) Len() int { return AtomicRequestLen }

// Append appends the wire form of r to b.
func (r *AtomicRequest) Append(b []byte) []byte {
	b = binary.BigEndian.AppendUint32(b, r.Reserved<<4|uint32(r.Op&atomicOpMask))
	b = binary.BigEndian.AppendUint32(b, r.ReqID)
	b = binary.BigEndian.AppendUint32(b, r.Stag)
	b = binary.BigEndian.AppendUint64(b, r.TO)
	b = binary.BigEndian.AppendUint64(b, r.AddSwap)
	b = binary.BigEndian.AppendUint64(b, r.AddSwapMask)
	b = binary.BigEndian.AppendUint64(b, r.Compare)
	return binary.BigEndian.AppendUint64(b, r.CompareMask)
}

// ParseAtomicRequest decodes the Atomic Request header at the start of b
// (the octets after the untagged DDP header). Whether the operation,
// target and reserved bits are acceptable is the responder's check.
func ParseAtomicRequest(b []byte) (AtomicRequest, int, error) {
	if len(b) < AtomicRequestLen {
		return AtomicRequest{}, 0, fmt.Errorf("%w: have %d bytes, need %d", ErrAtomicRequestTruncated, len(b), AtomicRequestLen)
	}
	w := binary.BigEndian.Uint32(b[0:4])
	return AtomicRequest{
		Reserved:    w >> 4,
		Op:          AtomicOp(w & atomicOpMask),
		ReqID:       binary.BigEndian.Uint32(b[4:8]),
		Stag:        binary.BigEndian.Uint32(b[8:12]),
		TO:          binary.BigEndian.Uint64(b[12:20]),
		AddSwap:     binary.BigEndian.Uint64(b[20:28]),
		AddSwapMask: binary.BigEndian.Uint64(b[28:36]),
		Compare:     binary.BigEndian.Uint64(b[36:44]),
		CompareMask: binary.BigEndian.Uint64(b[44:52]),
	}, AtomicRequestLen, nil
}

// Apply computes the operation on the target's original value: the value
// to store and whether to store it. FetchAdd's Add Mask marks field
// boundaries (a set bit ends a field: no carry out of it), so mask 0 is
// one 64-bit add; Swap stores the Swap Data bits under Swap Mask; CmpSwap
// does so only if the original equals Compare Data under Compare Mask.
func (r *AtomicRequest) Apply(orig uint64) (uint64, bool) {
	switch r.Op {
	case AtomicFetchAdd:
		return maskedAdd(orig, r.AddSwap, r.AddSwapMask), true
	case AtomicSwap:
		return orig&^r.AddSwapMask | r.AddSwap&r.AddSwapMask, true
	case AtomicCmpSwap:
		if (orig^r.Compare)&r.CompareMask != 0 {
			return orig, false
		}
		return orig&^r.AddSwapMask | r.AddSwap&r.AddSwapMask, true
	}
	return orig, false
}

// maskedAdd adds a to v as independent fields whose last (most
// significant) bits are the set bits of boundaries: a carry out of a
// boundary bit is dropped.
func maskedAdd(v, a, boundaries uint64) uint64 {
	if boundaries == 0 {
		return v + a
	}
	var out uint64
	lo := uint(0)
	for lo < 64 {
		hi := lo
		for hi < 63 && boundaries&(1<<hi) == 0 {
			hi++
		}
		width := hi - lo + 1
		mask := ^uint64(0)
		if width < 64 {
			mask = (uint64(1)<<width - 1) << lo
		}
		out |= ((v & mask) + (a & mask)) & mask
		lo = hi + 1
	}
	return out
}

// AtomicResponse is the RFC 7306 Atomic Response header: the whole payload
// of an untagged DDP message on QN 3 (QNAtomicResponse) with RDMAP opcode
// OpAtomicResponse, one segment. All fields big-endian.
//
//	 0                   1                   2                   3
//	 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|                  Original Request Identifier                  |
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|              Original Remote Data Value (64 bits)             |
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//
// 12 octets (AtomicResponseLen).
type AtomicResponse struct {
	ReqID    uint32
	Original uint64
}

// Len returns AtomicResponseLen (12).
func (r *AtomicResponse) Len() int { return AtomicResponseLen }

// Append appends the wire form of r to b.
func (r *AtomicResponse) Append(b []byte) []byte {
	b = binary.BigEndian.AppendUint32(b, r.ReqID)
	return binary.BigEndian.AppendUint64(b, r.Original)
}

// ParseAtomicResponse decodes the Atomic Response header at the start of b.
func ParseAtomicResponse(b []byte) (AtomicResponse, int, error) {
	if len(b) < AtomicResponseLen {
		return AtomicResponse{}, 0, fmt.Errorf("%w: have %d bytes, need %d", ErrAtomicResponseTruncated, len(b), AtomicResponseLen)
	}
	return AtomicResponse{ReqID: binary.BigEndian.Uint32(b[0:4]), Original: binary.BigEndian.Uint64(b[4:12])}, AtomicResponseLen, nil
}

// ImmediateData is the 8 octets of an RFC 7306 Immediate Data (or
// Immediate Data with Solicited Event) message: an untagged DDP message on
// QN 0 (QNSend, consuming a receive like a Send) whose whole payload they
// are. The verbs immediate value is 32 bits (ibv imm_data): iwarpd sends
// it in octets 0–3, big-endian, and zeros in octets 4–7; on receipt it
// reports octets 0–3 (Value) and keeps all 8 (Raw).
type ImmediateData struct {
	Raw [ImmediateDataLen]byte
}

// MakeImmediateData returns the Immediate Data carrying the 32-bit imm.
func MakeImmediateData(imm uint32) ImmediateData {
	var d ImmediateData
	binary.BigEndian.PutUint32(d.Raw[:4], imm)
	return d
}

// ImmediateMergeTag, in octets 4–7 of an Immediate Data (big-endian),
// marks it as the immediate of the Send that follows it on the stream:
// iwarpd's "merged" Send with Immediate (docs/atomics.md), which a QP
// created with merge_send_imm sends and folds into one receive. On the
// wire it is an ordinary RFC 7306 Immediate Data message (its 8 octets are
// the sender's data to RFC 7306); a peer that does not know the tag sees
// an Immediate Data whose value (octets 0–3) is the immediate.
const ImmediateMergeTag uint32 = 0x69774d53 // "iwMS"

// MakeMergedImmediateData returns the Immediate Data carrying imm and
// ImmediateMergeTag.
func MakeMergedImmediateData(imm uint32) ImmediateData {
	d := MakeImmediateData(imm)
	binary.BigEndian.PutUint32(d.Raw[4:], ImmediateMergeTag)
	return d
}

// Merged reports whether octets 4–7 carry ImmediateMergeTag.
func (d ImmediateData) Merged() bool { return binary.BigEndian.Uint32(d.Raw[4:]) == ImmediateMergeTag }

// Value is the 32-bit immediate value (octets 0–3).
func (d ImmediateData) Value() uint32 { return binary.BigEndian.Uint32(d.Raw[:4]) }

// Len returns ImmediateDataLen (8).
func (d *ImmediateData) Len() int { return ImmediateDataLen }

// Append appends the 8 octets to b.
func (d *ImmediateData) Append(b []byte) []byte { return append(b, d.Raw[:]...) }

// ParseImmediateData decodes the Immediate Data at the start of b.
func ParseImmediateData(b []byte) (ImmediateData, int, error) {
	if len(b) < ImmediateDataLen {
		return ImmediateData{}, 0, fmt.Errorf("%w: have %d bytes, need %d", ErrImmediateDataTruncated, len(b), ImmediateDataLen)
	}
	var d ImmediateData
	copy(d.Raw[:], b)
	return d, ImmediateDataLen, nil
}
