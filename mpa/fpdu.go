package mpa

import (
	"encoding/binary"
	"fmt"

	"github.com/iwarpd/iwarpd/internal/crc32c"
	"github.com/iwarpd/iwarpd/iwerr"
)

// An FPDU (Framed PDU, RFC 5044 §4) carries one ULPDU (one DDP segment):
//
//	 0                   1                   2                   3
//	 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|          ULPDU_Length         |                               |
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+                               +
//	|                                                               |
//	~                             ULPDU                             ~
//	|                                                               |
//	|                               +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|                               |          PAD (0-3 octets)     |
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|                              CRC                              |
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//
// ULPDU_Length counts the ULPDU only. PAD makes 2 + ULPDU_Length + PAD a
// multiple of 4 (§4.1). The CRC (§6) is CRC32c over everything from the
// first octet of the FPDU (a leading marker or ULPDU_Length) to the end of
// PAD, markers included, sent little-endian; the field is always present and
// is zero when CRC was not negotiated. Markers (marker.go) may be
// interleaved.

// Framing sizes.
const (
	LengthFieldLen = 2      // ULPDU_Length
	CRCLen         = 4      // the CRC field
	MaxULPDU       = 0xffff // largest ULPDU_Length
)

// PadLen returns the PAD length for a ULPDU of n octets (RFC 5044 §4.1).
func PadLen(n int) int { return (4 - (n+LengthFieldLen)%4) % 4 }

// FPDULen returns the length of an FPDU carrying n ULPDU octets, without
// markers: 2 + n + pad + 4.
func FPDULen(n int) int { return LengthFieldLen + n + PadLen(n) + CRCLen }

// MULPDU returns the largest ULPDU that keeps an FPDU, markers included,
// within one TCP segment of emss octets (RFC 5044 §5.3 / §5.4):
//
//	MULPDU = EMSS - (6 + 4 * ceil(EMSS / 512) + EMSS mod 4)   with markers
//	MULPDU = EMSS - (6 + EMSS mod 4)                          without
//
// capped at MaxULPDU and floored at 0.
func MULPDU(emss int, markers bool) int {
	if emss <= 0 {
		return 0
	}
	n := emss - (LengthFieldLen + CRCLen + emss%4)
	if markers {
		n -= MarkerLen * ((emss + MarkerInterval - 1) / MarkerInterval)
	}
	return max(0, min(n, MaxULPDU))
}

// noMarkers is an m0 beyond any FPDU: no marker position is reached.
const noMarkers = 1 << 30

// FPDU is one decoded FPDU (see ParseFPDU).
type FPDU struct {
	ULPDULength int
	// ULPDU is the DDP segment with markers removed. It aliases the input
	// unless a marker fell inside it, in which case it is a copy.
	ULPDU       []byte
	PadLen      int
	PadZero     bool   // every PAD octet is zero
	CRC         uint32 // the CRC field as sent (little-endian decoded)
	ComputedCRC uint32 // CRC32c over the covered octets; 0 when crc is off
	CRCValid    bool   // CRC == ComputedCRC; always true when crc is off
	Markers     []Marker
	WireLen     int // octets of b the FPDU occupies, markers included
}

// Err returns an error wrapping iwerr.MPACRCError when the CRC is invalid,
// else nil.
func (f *FPDU) Err() error {
	if f.CRCValid {
		return nil
	}
	return fmt.Errorf("mpa: fpdu: CRC 0x%08x, computed 0x%08x: %w", f.CRC, f.ComputedCRC, iwerr.MPACRCError)
}

// ParseFPDU decodes the FPDU at the start of b, whose first octet sits at
// stream position streamPos (octets since the marker origin; only its value
// mod 512 matters, and only when markers is set). crc says whether CRC was
// negotiated; markers whether the sender of b inserts markers.
//
// Errors: ErrTruncated (wrapped) when b is shorter than the FPDU; a marker
// whose FPDUPTR disagrees with the ULPDU_Length framing is an error wrapping
// iwerr.MPAMarkerMismatch. A bad CRC is not an error: it is reported in
// CRCValid (see FPDU.Err), so that decoders can show it.
func ParseFPDU(b []byte, streamPos uint64, crc, markers bool) (FPDU, error) {
	m0 := noMarkers
	if markers {
		m0 = firstMarker(streamPos)
	}
	if hi := wireOffset(m0, 1); len(b) <= hi {
		return FPDU{}, fmt.Errorf("mpa: fpdu: have %d octets, need %d for ULPDU_Length: %w", len(b), hi+1, ErrTruncated)
	}
	ulen := int(b[wireOffset(m0, 0)])<<8 | int(b[wireOffset(m0, 1)])
	pad := PadLen(ulen)
	crcStart := LengthFieldLen + ulen + pad
	logical := crcStart + CRCLen
	wireLen := logical
	if markers {
		wireLen += MarkerLen * markerCount(m0, logical)
	}
	if len(b) < wireLen {
		return FPDU{}, fmt.Errorf("mpa: fpdu: ULPDU_Length %d: have %d octets, need %d: %w", ulen, len(b), wireLen, ErrTruncated)
	}
	b = b[:wireLen]
	f := FPDU{ULPDULength: ulen, PadLen: pad, WireLen: wireLen, CRCValid: true, PadZero: true}

	if markers {
		n := markerCount(m0, logical)
		if n > 0 {
			f.Markers = make([]Marker, 0, n)
		}
		for k := range n {
			off := m0 + k*MarkerInterval
			m := Marker{
				StreamPos: streamPos + uint64(off),
				Reserved:  binary.BigEndian.Uint16(b[off : off+2]),
				FPDUPTR:   binary.BigEndian.Uint16(b[off+2 : off+4]),
			}
			f.Markers = append(f.Markers, m)
			if want := expectedFPDUPTR(streamPos, m.StreamPos); m.FPDUPTR != want {
				return FPDU{}, fmt.Errorf("mpa: fpdu: marker at stream position %d: FPDUPTR %d, ULPDU_Length framing says %d: %w",
					m.StreamPos, m.FPDUPTR, want, iwerr.MPAMarkerMismatch)
			}
		}
	}

	f.ULPDU = gatherLogical(b, m0, LengthFieldLen, LengthFieldLen+ulen, nil)
	var padAndCRC [3 + CRCLen]byte
	tail := gatherLogical(b, m0, LengthFieldLen+ulen, logical, padAndCRC[:0])
	for _, c := range tail[:pad] {
		if c != 0 {
			f.PadZero = false
		}
	}
	f.CRC = crc32c.Get(tail[pad:])
	if crc {
		f.ComputedCRC = crc32c.Checksum(b[:wireOffset(m0, crcStart)])
		f.CRCValid = f.CRC == f.ComputedCRC
	}
	return f, nil
}

// gatherLogical returns logical octets [from, to) of the FPDU b whose first
// marker position is at wire offset m0: a subslice of b when no marker falls
// inside, else the octets appended to dst (a new slice when dst is nil).
func gatherLogical(b []byte, m0, from, to int, dst []byte) []byte {
	if from >= to {
		if dst != nil {
			return dst
		}
		return nil
	}
	if nextMarkerLogical(m0, from) >= to {
		w := wireOffset(m0, from)
		return b[w : w+to-from : w+to-from]
	}
	if dst == nil {
		dst = make([]byte, 0, to-from)
	}
	for x := from; x < to; {
		end := min(to, nextMarkerLogical(m0, x))
		w := wireOffset(m0, x)
		dst = append(dst, b[w:w+end-x]...)
		x = end
	}
	return dst
}
