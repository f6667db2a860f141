package mpa

import (
	"encoding/binary"
	"fmt"
)

// Request/Reply frame constants (RFC 5044 §7.1).
const (
	KeyRequest     = "MPA ID Req Frame"
	KeyReply       = "MPA ID Rep Frame"
	FrameHeaderLen = 20  // key, flags, Rev, PD_Length
	MaxPrivateData = 512 // largest PD_Length (RFC 5044 §7.1)
	keyLen         = 16
)

// Flag octet bits (RFC 5044 §7.1; S from RFC 6581 §5).
const (
	flagMarkers      = 0x80
	flagCRC          = 0x40
	flagReject       = 0x20
	flagEnhanced     = 0x10
	maskReservedFlag = 0x0f
)

// Frame is an MPA Request or Reply frame, sent once in each direction at the
// start of the TCP stream before any FPDU (RFC 5044 §7.1, RFC 6581 §5):
//
//	 0                   1                   2                   3
//	 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|                                                               |
//	+         Key ("MPA ID Req Frame" or "MPA ID Rep Frame")        +
//	|                          (16 octets)                          |
//	+                                                               +
//	|                                                               |
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|M|C|R|S| Res   |     Rev       |          PD_Length            |
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	~                   Private Data (PD_Length octets)             ~
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//
// M: the sender wants markers in the FPDUs it receives. C: the sender asks
// for CRC32c (CRC is used when either frame has C). R: the responder rejects
// the connection (Reply only). S (RFC 6581): Private Data begins with the
// 4-octet IRD/ORD block, see Enhanced. Rev: 1 for RFC 5044, 2 for RFC 6581.
type Frame struct {
	Reply    bool // key is KeyReply, else KeyRequest
	Markers  bool // M, 0x80
	CRC      bool // C, 0x40
	Reject   bool // R, 0x20
	Enhanced bool // S, 0x10 (RFC 6581)
	// ReservedFlags holds the low 4 bits of the flag octet. 0x08 is siw's
	// private GSO bit: send 0, ignore on receive.
	ReservedFlags uint8
	Revision      uint8
	// PrivateData is the raw private data. For Rev 2 with S it begins with
	// the IRD/ORD block (ParseEnhanced splits it off). ParseFrame makes it
	// alias the input buffer.
	PrivateData []byte
}

// Len returns the encoded length of f: 20 + len(PrivateData).
func (f *Frame) Len() int { return FrameHeaderLen + min(len(f.PrivateData), 0xffff) }

// Append appends the wire form of f to b. PD_Length is len(PrivateData) as
// given, so that tests can build invalid frames; senders keep it within
// MaxPrivateData (Policy.Validate checks it). Private data beyond 65535
// octets, which PD_Length cannot express, is not written.
func (f *Frame) Append(b []byte) []byte {
	if f.Reply {
		b = append(b, KeyReply...)
	} else {
		b = append(b, KeyRequest...)
	}
	flags := f.ReservedFlags & maskReservedFlag
	if f.Markers {
		flags |= flagMarkers
	}
	if f.CRC {
		flags |= flagCRC
	}
	if f.Reject {
		flags |= flagReject
	}
	if f.Enhanced {
		flags |= flagEnhanced
	}
	pd := f.PrivateData[:min(len(f.PrivateData), 0xffff)]
	b = append(b, flags, f.Revision)
	b = binary.BigEndian.AppendUint16(b, uint16(len(pd)))
	return append(b, pd...)
}

// ParseFrame decodes the Request or Reply frame at the start of b and returns
// it with its encoded length. Errors: ErrTruncated (wrapped; buffer more
// bytes and retry), ErrBadKey, ErrPrivateDataTooLong. The returned
// PrivateData aliases b. Revision and reserved bits are reported, not judged:
// that is the negotiation's business.
func ParseFrame(b []byte) (Frame, int, error) {
	if len(b) < FrameHeaderLen {
		return Frame{}, 0, fmt.Errorf("mpa: frame: have %d octets, need %d: %w", len(b), FrameHeaderLen, ErrTruncated)
	}
	var f Frame
	switch string(b[:keyLen]) {
	case KeyRequest:
	case KeyReply:
		f.Reply = true
	default:
		return Frame{}, 0, fmt.Errorf("mpa: frame: key %q: %w", b[:keyLen], ErrBadKey)
	}
	flags := b[16]
	f.Markers = flags&flagMarkers != 0
	f.CRC = flags&flagCRC != 0
	f.Reject = flags&flagReject != 0
	f.Enhanced = flags&flagEnhanced != 0
	f.ReservedFlags = flags & maskReservedFlag
	f.Revision = b[17]
	pdLen := int(binary.BigEndian.Uint16(b[18:20]))
	if pdLen > MaxPrivateData {
		return Frame{}, 0, fmt.Errorf("mpa: frame: PD_Length %d: %w", pdLen, ErrPrivateDataTooLong)
	}
	n := FrameHeaderLen + pdLen
	if len(b) < n {
		return Frame{}, 0, fmt.Errorf("mpa: frame: have %d octets, need %d: %w", len(b), n, ErrTruncated)
	}
	if pdLen > 0 {
		f.PrivateData = b[FrameHeaderLen:n:n]
	}
	return f, n, nil
}

// EnhancedLen is the length of the RFC 6581 IRD/ORD block.
const EnhancedLen = 4

// MaxIRDORD is the largest IRD or ORD the 14-bit fields carry.
const MaxIRDORD = 0x3fff

// Control bits of the IRD/ORD block (RFC 6581 §5).
const (
	enhPeerToPeer = 0x8000 // A, IRD word
	enhSendRTR    = 0x4000 // B, IRD word
	enhWriteRTR   = 0x8000 // C, ORD word
	enhReadRTR    = 0x4000 // D, ORD word
)

// Enhanced is the RFC 6581 §5 block at the start of the private data of a
// Rev 2 frame with S set:
//
//	 0                   1                   2                   3
//	 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|A|B|           IRD             |C|D|           ORD             |
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//
// A: peer-to-peer model. B, C, D: zero-length Send, RDMA Write, RDMA Read
// ready-to-receive (RTR) message; in a Request the types offered, in a Reply
// the one chosen.
type Enhanced struct {
	IRD, ORD   uint16 // 14 bits each
	PeerToPeer bool   // A
	SendRTR    bool   // B
	WriteRTR   bool   // C
	ReadRTR    bool   // D
}

// ParseEnhanced splits the IRD/ORD block off the front of pd (the private
// data of a Rev 2 frame with S set) and returns it with the ULP private data
// that follows (aliasing pd).
func ParseEnhanced(pd []byte) (Enhanced, []byte, error) {
	if len(pd) < EnhancedLen {
		return Enhanced{}, nil, fmt.Errorf("mpa: IRD/ORD block: have %d octets, need %d: %w", len(pd), EnhancedLen, ErrTruncated)
	}
	w0 := binary.BigEndian.Uint16(pd[0:2])
	w1 := binary.BigEndian.Uint16(pd[2:4])
	e := Enhanced{
		IRD:        w0 & MaxIRDORD,
		ORD:        w1 & MaxIRDORD,
		PeerToPeer: w0&enhPeerToPeer != 0,
		SendRTR:    w0&enhSendRTR != 0,
		WriteRTR:   w1&enhWriteRTR != 0,
		ReadRTR:    w1&enhReadRTR != 0,
	}
	ulp := pd[EnhancedLen:]
	if len(ulp) == 0 {
		ulp = nil
	}
	return e, ulp, nil
}

// Append appends the 4-octet wire form of e to b. IRD and ORD are masked to
// 14 bits.
func (e Enhanced) Append(b []byte) []byte {
	w0 := e.IRD & MaxIRDORD
	w1 := e.ORD & MaxIRDORD
	if e.PeerToPeer {
		w0 |= enhPeerToPeer
	}
	if e.SendRTR {
		w0 |= enhSendRTR
	}
	if e.WriteRTR {
		w1 |= enhWriteRTR
	}
	if e.ReadRTR {
		w1 |= enhReadRTR
	}
	b = binary.BigEndian.AppendUint16(b, w0)
	return binary.BigEndian.AppendUint16(b, w1)
}

// rtrSet returns the RTR types flagged in e.
func (e Enhanced) rtrSet() RTRSet {
	var s RTRSet
	if e.SendRTR {
		s |= RTRSetSend
	}
	if e.WriteRTR {
		s |= RTRSetWrite
	}
	if e.ReadRTR {
		s |= RTRSetRead
	}
	return s
}

// setRTR sets e's B/C/D flags from s.
func (e *Enhanced) setRTR(s RTRSet) {
	e.SendRTR = s&RTRSetSend != 0
	e.WriteRTR = s&RTRSetWrite != 0
	e.ReadRTR = s&RTRSetRead != 0
}
