package dgram

import (
	"encoding/binary"
	"fmt"
)

// RDVersion is the RD header version this profile defines.
const RDVersion = 1

// RDHeaderLen is the length of the RD header.
const RDHeaderLen = 24

// RDType is the 4-bit datagram type of the RD header.
type RDType uint8

const (
	// RDData: a DDP segment follows the header (sequenced, acknowledged).
	RDData RDType = 1
	// RDAck: nothing follows; the header alone carries acknowledgements
	// and/or flags (NOTREADY, RESET, ACKREQ). Not sequenced.
	RDAck RDType = 2
)

func (t RDType) String() string {
	switch t {
	case RDData:
		return "DATA"
	case RDAck:
		return "ACK"
	}
	return fmt.Sprintf("type(%d)", uint8(t))
}

// RDFlags is the flags octet of the RD header.
type RDFlags uint8

const (
	// FlagAck: Window, EchoedIncarnation, CumAck and SACK are valid. May be
	// set on DATA (piggybacked acknowledgement).
	FlagAck RDFlags = 0x80
	// FlagAckReq: the sender asks the peer to acknowledge now rather than
	// after its delayed-ack timer.
	FlagAckReq RDFlags = 0x40
	// FlagNotReady: the datagram with sequence number CumAck was discarded
	// because the receiver had no posted receive (RNR): the sender retries
	// it after a back-off and does not treat it as loss.
	FlagNotReady RDFlags = 0x20
	// FlagReset: the sender of this header restarted or has no state for
	// the incarnation pair; the receiver drops its state for the pair.
	FlagReset RDFlags = 0x10
	// FlagExtSACK (X, docs/wire-format.md §7.1): the header's sender takes
	// SACK Block ACKs. Set on every header but RESET by iwarpd; a receiver
	// sends SACK Blocks only to a peer that announced it (an older peer
	// ignores the bit: it never gets them, and never sends them).
	FlagExtSACK RDFlags = 0x08
	// FlagSACKBlock (B), on an ACK-type datagram with FlagAck: the SACK
	// bitmap covers Seq … Seq+31 (Seq > CumAck+32) instead of
	// CumAck+1 … CumAck+32; CumAck and Window are as on any ACK.
	FlagSACKBlock RDFlags = 0x04
	// FlagChallenge (C, docs/wire-format.md §7.4), on an ACK-type datagram
	// without FlagAck: the header's sender keeps no state for the peer and
	// will take its DATA only when it carries the cookie in CumAck (DATA
	// without FlagAck carries the sender's cookie for the peer there).
	FlagChallenge RDFlags = 0x02
	// FlagsReserved are sent 0 and ignored on receive.
	FlagsReserved RDFlags = 0x01
)

// RDHeader is the header that precedes the DDP segment (or stands alone) in
// every datagram of a reliable-datagram QP (docs/wire-format.md §"RD
// header"; an iwarpd format, not an RFC one). 24 octets, big-endian:
//
//	 0                   1                   2                   3
//	 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|Version| Type  |A|Q|N|R|X|B|C|r|            Window             |
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|                     Sender Incarnation                        |
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|                     Echoed Incarnation                        |
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|                       Sequence Number                         |
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|                      Cumulative Ack                           |
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|                   Selective-Ack Bitmap                        |
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//
// A = ACK, Q = ACKREQ, N = NOTREADY, R = RESET, X = extended SACK, B = SACK
// Block, C = Challenge, r = reserved (see the Flag constants).
// Sequence numbers are 32-bit serial numbers (RFC 1982 arithmetic: SeqLess).
// CumAck: every sequence number before it has been received. SACK bit i
// (LSB = bit 0) set: sequence CumAck+1+i has been received too.
type RDHeader struct {
	Version           uint8 // 4 bits; RDVersion
	Type              RDType
	Flags             RDFlags
	Window            uint16 // datagrams the header's sender accepts from CumAck on
	Incarnation       uint32 // sender's, random non-zero per QP life
	EchoedIncarnation uint32 // the peer's incarnation as the sender knows it, 0 = unknown
	Seq               uint32 // this DATA datagram's sequence number; 0 on ACK
	CumAck            uint32
	SACK              uint32
}

// Len returns RDHeaderLen.
func (h *RDHeader) Len() int { return RDHeaderLen }

// Append appends the 24-octet wire form of h to b. Version and Type are
// masked to 4 bits each.
func (h *RDHeader) Append(b []byte) []byte {
	b = append(b, h.Version<<4|uint8(h.Type)&0x0f, uint8(h.Flags))
	b = binary.BigEndian.AppendUint16(b, h.Window)
	b = binary.BigEndian.AppendUint32(b, h.Incarnation)
	b = binary.BigEndian.AppendUint32(b, h.EchoedIncarnation)
	b = binary.BigEndian.AppendUint32(b, h.Seq)
	b = binary.BigEndian.AppendUint32(b, h.CumAck)
	return binary.BigEndian.AppendUint32(b, h.SACK)
}

// ParseRDHeader decodes the RD header at the start of b and returns it with
// its length. It fails with ErrTruncated if b is shorter than RDHeaderLen,
// ErrVersion if Version is not RDVersion (the rest is then undefined), and
// ErrBadType if Type is neither RDData nor RDAck. Reserved flag bits are
// returned as received.
func ParseRDHeader(b []byte) (RDHeader, int, error) {
	if len(b) < RDHeaderLen {
		return RDHeader{}, 0, fmt.Errorf("%w: RD header: have %d bytes, need %d", ErrTruncated, len(b), RDHeaderLen)
	}
	h := RDHeader{
		Version:           b[0] >> 4,
		Type:              RDType(b[0] & 0x0f),
		Flags:             RDFlags(b[1]),
		Window:            binary.BigEndian.Uint16(b[2:4]),
		Incarnation:       binary.BigEndian.Uint32(b[4:8]),
		EchoedIncarnation: binary.BigEndian.Uint32(b[8:12]),
		Seq:               binary.BigEndian.Uint32(b[12:16]),
		CumAck:            binary.BigEndian.Uint32(b[16:20]),
		SACK:              binary.BigEndian.Uint32(b[20:24]),
	}
	if h.Version != RDVersion {
		return h, 0, fmt.Errorf("%w: RD header version %d", ErrVersion, h.Version)
	}
	if h.Type != RDData && h.Type != RDAck {
		return h, 0, fmt.Errorf("%w: RD header type %d", ErrBadType, uint8(h.Type))
	}
	return h, RDHeaderLen, nil
}

// Acked reports whether h acknowledges sequence number seq: h carries valid
// ack fields (FlagAck) and seq is before CumAck or has its SACK bit set.
func (h *RDHeader) Acked(seq uint32) bool {
	if h.Flags&FlagAck == 0 {
		return false
	}
	if SeqLess(seq, h.CumAck) {
		return true
	}
	d := seq - h.CumAck - 1 // bit index; huge when seq == CumAck
	return d < 32 && h.SACK&(1<<d) != 0
}

// SeqLess reports whether a precedes b in 32-bit serial-number arithmetic
// (RFC 1982 §3.2): b − a, taken modulo 2^32, is in [1, 2^31). Two numbers
// exactly 2^31 apart are unordered (both SeqLess(a, b) and SeqLess(b, a)
// are false); the RD window is far smaller, so this never arises.
func SeqLess(a, b uint32) bool {
	d := b - a
	return d != 0 && d < 1<<31
}

// SeqLessEq reports whether a == b or SeqLess(a, b).
func SeqLessEq(a, b uint32) bool { return a == b || SeqLess(a, b) }

// SeqDiff returns b − a as a signed distance: positive if b is after a.
func SeqDiff(a, b uint32) int32 { return int32(b - a) }
