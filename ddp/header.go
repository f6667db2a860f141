package ddp

import (
	"encoding/binary"
	"errors"
	"fmt"
)

// Version is the DDP version this stack speaks (RFC 5041 §4.2, DV field).
const Version = 1

// Header lengths (RFC 5041 §4.2, §4.3).
const (
	TaggedHeaderLen   = 14
	UntaggedHeaderLen = 18
)

// Control octet 0 bits (RFC 5041 §4.2).
const (
	flagTagged   = 0x80
	flagLast     = 0x40
	maskReserved = 0x3c
	maskVersion  = 0x03
)

// ErrTruncated is returned by parsers when the input is shorter than the
// header it announces.
var ErrTruncated = errors.New("ddp: truncated header")

// Header is a DDP segment header, tagged (RFC 5041 §4.2) or untagged (§4.3).
//
// Tagged buffer model, 14 octets:
//
//	 0                   1                   2                   3
//	 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|T|L| Resrv | DV| RsvdULP       |             STag              |
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|     STag (cont.)              |              TO               |
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|                            TO (cont.)                         |
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|     TO (cont.)                |
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//
// Untagged buffer model, 18 octets:
//
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|T|L| Resrv | DV| RsvdULP[0:7]  |            RsvdULP[8:39]      |
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|         RsvdULP (cont.)       |              QN               |
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|         QN (cont.)            |              MSN              |
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|         MSN (cont.)           |              MO               |
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|         MO (cont.)            |
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//
// RsvdULP[0:7] is the RDMAP control octet (RFC 5040 §4.3); RsvdULP[8:39]
// carries RDMAP's Invalidate STag for the Send-with-Invalidate variants.
type Header struct {
	Tagged   bool
	Last     bool
	Reserved uint8 // the 4 reserved bits of octet 0 (sent 0)
	Version  uint8 // DV, 2 bits

	ULPControl uint8 // RsvdULP[0:7]: the RDMAP control octet

	// Tagged buffer model.
	Stag uint32
	TO   uint64

	// Untagged buffer model.
	ULPReserved uint32 // RsvdULP[8:39]
	QN          uint32
	MSN         uint32
	MO          uint32
}

// Len returns the encoded header length: 14 tagged, 18 untagged.
func (h *Header) Len() int {
	if h.Tagged {
		return TaggedHeaderLen
	}
	return UntaggedHeaderLen
}

// HeaderLen returns the length of the DDP header that starts b, judged from
// its T bit, or 0 if b is empty.
func HeaderLen(b []byte) int {
	if len(b) == 0 {
		return 0
	}
	if b[0]&flagTagged != 0 {
		return TaggedHeaderLen
	}
	return UntaggedHeaderLen
}

// Append appends the wire form of h to b. Reserved and Version are encoded as
// given (masked to their widths); use Version for conforming segments.
func (h *Header) Append(b []byte) []byte {
	c0 := h.Reserved<<2&maskReserved | h.Version&maskVersion
	if h.Tagged {
		c0 |= flagTagged
	}
	if h.Last {
		c0 |= flagLast
	}
	b = append(b, c0, h.ULPControl)
	if h.Tagged {
		b = binary.BigEndian.AppendUint32(b, h.Stag)
		return binary.BigEndian.AppendUint64(b, h.TO)
	}
	b = binary.BigEndian.AppendUint32(b, h.ULPReserved)
	b = binary.BigEndian.AppendUint32(b, h.QN)
	b = binary.BigEndian.AppendUint32(b, h.MSN)
	return binary.BigEndian.AppendUint32(b, h.MO)
}

// Parse decodes the DDP header at the start of b and returns it with its
// length. It checks only that b is long enough; semantic checks (version,
// reserved bits, QN, MSN, MO, bounds) belong to the receive path.
func Parse(b []byte) (Header, int, error) {
	n := HeaderLen(b)
	if n == 0 || len(b) < n {
		return Header{}, 0, fmt.Errorf("%w: have %d bytes, need %d", ErrTruncated, len(b), max(n, TaggedHeaderLen))
	}
	h := Header{
		Tagged:     b[0]&flagTagged != 0,
		Last:       b[0]&flagLast != 0,
		Reserved:   b[0] & maskReserved >> 2,
		Version:    b[0] & maskVersion,
		ULPControl: b[1],
	}
	if h.Tagged {
		h.Stag = binary.BigEndian.Uint32(b[2:6])
		h.TO = binary.BigEndian.Uint64(b[6:14])
	} else {
		h.ULPReserved = binary.BigEndian.Uint32(b[2:6])
		h.QN = binary.BigEndian.Uint32(b[6:10])
		h.MSN = binary.BigEndian.Uint32(b[10:14])
		h.MO = binary.BigEndian.Uint32(b[14:18])
	}
	return h, n, nil
}
