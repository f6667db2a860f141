package ofverbs

import (
	"encoding/binary"
	"errors"
	"fmt"
)

// The record of an RDMA Write-Record (docs/write-record.md). When a
// Write-Record completes at its target (WC.Opcode WCRecvWriteRecord, one
// posted receive consumed), the receive's buffer holds which byte ranges of
// the message were placed in the target region, all little-endian:
//
//	0         Count   u32
//	4 + 8·i   Offset  u32   range i: first octet, from the message's base TO (WC.TO)
//	8 + 8·i   Length  u32   range i: octets
//
// The ranges are sorted, disjoint and not adjacent. A message placed whole
// has one range {0, WC.ByteLen} (none when it is empty); WCFlagRecordTrim
// says that not every octet was placed (segments were lost on UD) or that
// the receive buffer could not hold every range (then Count is the number
// that fit). A receive buffer of at least 4 + 8·n octets holds n ranges.

// ErrRecordTruncated is returned by ParseRecord when b is shorter than the
// record it announces.
var ErrRecordTruncated = errors.New("ofverbs: truncated Write-Record record")

// Range is one placed byte range of a Write-Record message.
type Range struct {
	Offset uint32 // from the message's base tagged offset (WC.TO)
	Length uint32
}

// RecordLen returns the octets of a record of n ranges.
func RecordLen(n int) int { return 4 + 8*n }

// ParseRecord decodes the record at the start of b (the receive buffer of a
// WCRecvWriteRecord completion). It returns the ranges (nil for none).
func ParseRecord(b []byte) ([]Range, error) {
	if len(b) < 4 {
		return nil, fmt.Errorf("%w: %d octets, need 4", ErrRecordTruncated, len(b))
	}
	n := binary.LittleEndian.Uint32(b)
	if uint64(n) > uint64(len(b)-4)/8 {
		return nil, fmt.Errorf("%w: %d ranges in %d octets", ErrRecordTruncated, n, len(b))
	}
	if n == 0 {
		return nil, nil
	}
	r := make([]Range, n)
	for i := range r {
		o := 4 + 8*i
		r[i] = Range{Offset: binary.LittleEndian.Uint32(b[o:]), Length: binary.LittleEndian.Uint32(b[o+4:])}
	}
	return r, nil
}

// AppendRecord appends the record of ranges to b (what the daemon writes;
// for tests and for tools that forward records).
func AppendRecord(b []byte, ranges []Range) []byte {
	b = binary.LittleEndian.AppendUint32(b, uint32(len(ranges)))
	for _, r := range ranges {
		b = binary.LittleEndian.AppendUint32(b, r.Offset)
		b = binary.LittleEndian.AppendUint32(b, r.Length)
	}
	return b
}
