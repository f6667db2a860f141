package rdmap

import (
	"encoding/binary"
	"errors"
	"fmt"

	"github.com/iwarpd/iwarpd/ddp"
	"github.com/iwarpd/iwarpd/iwerr"
)

// ErrTerminateTruncated is returned by ParseTerminate when b is shorter than
// the Terminate header its control word announces.
var ErrTerminateTruncated = errors.New("rdmap: truncated Terminate header")

// Terminate header control bits (RFC 5040 §4.8), big-endian layout, octet 2.
const (
	termFlagM        = 0x80 // DDP Segment Length valid
	termFlagD        = 0x40 // DDP header included
	termFlagR        = 0x20 // RDMAP header included
	termReservedMask = 0x1fff

	// Linux siw's little-endian bitfield layout (see Terminate.SiwLayout).
	siwFlagM = 0x01
	siwFlagD = 0x02
	siwFlagR = 0x04

	// TerminatedRDMAPHeaderLen is the length of the Terminated RDMA Header
	// (the Read Request header, the only RDMAP header longer than the
	// control octet in RFC 5040).
	TerminatedRDMAPHeaderLen = ReadRequestLen
	termSegLenLen            = 2
)

// Terminate is the header of the RDMAP Terminate message (RFC 5040 §4.8): the
// payload of an untagged DDP message on QN 2 (QNTerminate), opcode
// OpTerminate, L=1, one segment.
//
//	 0                   1                   2                   3
//	 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	| Layer | EType |  Error Code   |M|D|R|       Reserved          |
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|  DDP Segment Length (if D)    |                               |
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+                               +
//	|          Terminated DDP Header (if D: 14 or 18 octets)        |
//	+                               +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|                               |                               |
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+                               +
//	|          Terminated RDMA Header (if R: 28 octets)             |
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//
// Presence rule: the 16-bit DDP Segment Length field and the Terminated DDP
// Header are present together, when D is set; M only says whether the length
// value is meaningful. This is how Wireshark's iwarp_ddp_rdmap dissector reads
// the message (it reads the length when D is set) and what Linux siw sends
// (it always sets M and D together); the RFC text could not be quoted here,
// so treat the M-without-D case as [unverified]: we never send it, and on
// receipt M without D carries no length field. The Terminated DDP Header's
// length is taken from its own T bit (14 tagged, 18 untagged).
//
// DDPHeader and RDMAPHeader returned by ParseTerminate alias the input.
type Terminate struct {
	Err                 iwerr.Error // Layer, EType, ECode
	SegLenValid         bool        // M
	DDPHeaderIncluded   bool        // D
	RDMAPHeaderIncluded bool        // R
	Reserved            uint16      // 13 bits; sent as 0
	DDPSegmentLength    uint16      // present on the wire when D; meaningful when M
	DDPHeader           []byte      // the terminated DDP header, when D
	RDMAPHeader         []byte      // the terminated RDMAP header, when R
	// SiwLayout reports (on parse) or requests (on Append) Linux siw's
	// little-endian bitfield control word: octet 0 = EType<<4 | Layer,
	// octet 1 = ECode, M/D/R = 0x01/0x02/0x04 of octet 2, reserved in
	// the rest. iwarpd sends the RFC layout; SiwLayout on Append exists
	// to emulate siw in tests.
	SiwLayout bool
}

// Len returns the encoded length of t.
func (t *Terminate) Len() int {
	n := TerminateFixedLen
	if t.DDPHeaderIncluded {
		n += termSegLenLen + len(t.DDPHeader)
	}
	if t.RDMAPHeaderIncluded {
		n += len(t.RDMAPHeader)
	}
	return n
}

// Append appends the wire form of t to b: the control word (RFC layout unless
// SiwLayout), then, when D, the DDP Segment Length and DDPHeader, then, when
// R, RDMAPHeader. Headers are written as given; TerminateFor builds
// consistent ones.
func (t *Terminate) Append(b []byte) []byte {
	layer, etype := uint8(t.Err.Layer)&0xf, t.Err.Type&0xf
	res := t.Reserved & termReservedMask
	if t.SiwLayout {
		var f uint8
		if t.SegLenValid {
			f |= siwFlagM
		}
		if t.DDPHeaderIncluded {
			f |= siwFlagD
		}
		if t.RDMAPHeaderIncluded {
			f |= siwFlagR
		}
		b = append(b, etype<<4|layer, t.Err.Code, f|uint8(res<<3), uint8(res>>5))
	} else {
		var f uint8
		if t.SegLenValid {
			f |= termFlagM
		}
		if t.DDPHeaderIncluded {
			f |= termFlagD
		}
		if t.RDMAPHeaderIncluded {
			f |= termFlagR
		}
		b = append(b, layer<<4|etype, t.Err.Code, f|uint8(res>>8), uint8(res))
	}
	if t.DDPHeaderIncluded {
		b = binary.BigEndian.AppendUint16(b, t.DDPSegmentLength)
		b = append(b, t.DDPHeader...)
	}
	if t.RDMAPHeaderIncluded {
		b = append(b, t.RDMAPHeader...)
	}
	return b
}

// ParseTerminate decodes the Terminate header at the start of b (the octets
// after the untagged DDP header) and returns it with the number of octets
// used. It reads the RFC 5040 layout and, tolerantly, Linux siw's
// little-endian bitfield layout, reporting which in SiwLayout.
//
// Detection rule (SiwLayoutLikely): a control word is read as siw's when
//
//  1. under the RFC reading its reserved bits are non-zero, all of them in
//     the three siw flag positions (octet 2 & 0x07 ≠ 0, octet 2 & 0xf8 = 0,
//     octet 3 = 0), and the nibble-swapped triple is a registered error; or
//  2. octets 2 and 3 are zero (no flags either way), the RFC triple is not a
//     registered error and the nibble-swapped one is.
//
// An RFC-conformant sender never matches rule 1 (its reserved bits are zero)
// and matches rule 2 only with an unregistered error triple. A siw Terminate
// without flags whose nibbles read as a registered triple both ways (e.g.
// siw's RDMAP/remote operation, octet 0 = 0x20, reads as LLP/MPA under the
// RFC) cannot be told apart and is read as RFC; a caller that knows its peer
// is siw uses ParseTerminateAs.
//
// In siw layout, R without room for a 28-octet RDMAP header after the DDP
// header leaves RDMAPHeader empty (siw attaches only the DDP header of a
// terminated Send while setting R).
func ParseTerminate(b []byte) (Terminate, int, error) {
	if len(b) < TerminateFixedLen {
		return Terminate{}, 0, fmt.Errorf("%w: have %d bytes, need %d", ErrTerminateTruncated, len(b), TerminateFixedLen)
	}
	return ParseTerminateAs(b, SiwLayoutLikely(b))
}

// SiwLayoutLikely applies ParseTerminate's detection rule to the 4-octet
// control word at the start of b (false if b is shorter).
func SiwLayoutLikely(b []byte) bool {
	if len(b) < TerminateFixedLen {
		return false
	}
	rfc := iwerr.Error{Layer: iwerr.Layer(b[0] >> 4), Type: b[0] & 0xf, Code: b[1]}
	swapped := iwerr.Error{Layer: iwerr.Layer(b[0] & 0xf), Type: b[0] >> 4, Code: b[1]}
	if b[2]&0x07 != 0 && b[2]&0xf8 == 0 && b[3] == 0 {
		return swapped.Known()
	}
	return b[2] == 0 && b[3] == 0 && !rfc.Known() && swapped.Known()
}

// ParseTerminateAs is ParseTerminate with the control word layout given:
// siw = true reads Linux siw's little-endian bitfields.
func ParseTerminateAs(b []byte, siw bool) (Terminate, int, error) {
	if len(b) < TerminateFixedLen {
		return Terminate{}, 0, fmt.Errorf("%w: have %d bytes, need %d", ErrTerminateTruncated, len(b), TerminateFixedLen)
	}
	var t Terminate
	if siw {
		t = Terminate{
			Err:                 iwerr.Error{Layer: iwerr.Layer(b[0] & 0xf), Type: b[0] >> 4, Code: b[1]},
			SegLenValid:         b[2]&siwFlagM != 0,
			DDPHeaderIncluded:   b[2]&siwFlagD != 0,
			RDMAPHeaderIncluded: b[2]&siwFlagR != 0,
			Reserved:            uint16(b[2]>>3) | uint16(b[3])<<5,
			SiwLayout:           true,
		}
	} else {
		t = Terminate{
			Err:                 iwerr.Error{Layer: iwerr.Layer(b[0] >> 4), Type: b[0] & 0xf, Code: b[1]},
			SegLenValid:         b[2]&termFlagM != 0,
			DDPHeaderIncluded:   b[2]&termFlagD != 0,
			RDMAPHeaderIncluded: b[2]&termFlagR != 0,
			Reserved:            binary.BigEndian.Uint16(b[2:4]) & termReservedMask,
		}
	}
	n := TerminateFixedLen
	if t.DDPHeaderIncluded {
		// Length field plus at least the header's first octet (its T bit).
		if len(b) < n+termSegLenLen+1 {
			return Terminate{}, 0, fmt.Errorf("%w: DDP header: have %d bytes, need %d", ErrTerminateTruncated, len(b), n+termSegLenLen+1)
		}
		t.DDPSegmentLength = binary.BigEndian.Uint16(b[n : n+termSegLenLen])
		n += termSegLenLen
		hl := ddp.HeaderLen(b[n:])
		if len(b) < n+hl {
			return Terminate{}, 0, fmt.Errorf("%w: DDP header: have %d bytes, need %d", ErrTerminateTruncated, len(b), n+hl)
		}
		t.DDPHeader = b[n : n+hl : n+hl]
		n += hl
	}
	if t.RDMAPHeaderIncluded {
		if len(b) >= n+TerminatedRDMAPHeaderLen {
			t.RDMAPHeader = b[n : n+TerminatedRDMAPHeaderLen : n+TerminatedRDMAPHeaderLen]
			n += TerminatedRDMAPHeaderLen
		} else if !siw {
			return Terminate{}, 0, fmt.Errorf("%w: RDMAP header: have %d bytes, need %d", ErrTerminateTruncated, len(b), n+TerminatedRDMAPHeaderLen)
		}
	}
	return t, n, nil
}

// SetSegmentLength records the length of the terminated DDP segment and sets
// M. It matters only when the DDP header is included (D).
func (t *Terminate) SetSegmentLength(n uint16) {
	t.DDPSegmentLength = n
	t.SegLenValid = true
}

// TerminateFor builds the Terminate header reporting err about the segment
// whose DDP header is ddpHdr and, if that segment was an RDMA Read Request,
// whose 28-octet Read Request header is rdmapHdr (pass nil otherwise). The
// slices are kept, not copied.
//
// Which headers go in (RFC 5040 §4.8, §7; as Linux siw does):
//   - none for local catastrophic errors (RDMAP or DDP EType 0), for DDP
//     invalid-version errors (the segment's layout is unknown) and for LLP
//     (MPA) errors;
//   - otherwise the DDP header (D) when ddpHdr is a whole DDP header
//     (14 octets tagged or 18 untagged, by its T bit), and with it the
//     RDMAP header (R) when rdmapHdr is 28 octets.
//
// M is left clear: call SetSegmentLength when the segment length is known.
func TerminateFor(err iwerr.Error, ddpHdr []byte, rdmapHdr []byte) Terminate {
	t := Terminate{Err: err}
	if !headersAllowed(err) {
		return t
	}
	if hl := ddp.HeaderLen(ddpHdr); hl == 0 || len(ddpHdr) != hl {
		return t
	}
	t.DDPHeaderIncluded = true
	t.DDPHeader = ddpHdr
	if len(rdmapHdr) == TerminatedRDMAPHeaderLen {
		t.RDMAPHeaderIncluded = true
		t.RDMAPHeader = rdmapHdr
	}
	return t
}

func headersAllowed(err iwerr.Error) bool {
	switch err.Layer {
	case iwerr.LayerRDMAP:
		return err.Type != iwerr.RDMAPLocalCatastrophic
	case iwerr.LayerDDP:
		switch {
		case err.Type == iwerr.DDPLocalCatastrophic,
			err == iwerr.DDPTaggedInvalidVersion,
			err == iwerr.DDPUntaggedInvalidVersion:
			return false
		}
		return true
	}
	return false
}
