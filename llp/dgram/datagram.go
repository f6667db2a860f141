package dgram

import (
	"errors"
	"fmt"

	"github.com/iwarpd/iwarpd/internal/crc32c"
	"github.com/iwarpd/iwarpd/iwerr"
)

// Errors of the datagram codecs. Every one of them means "drop the datagram
// and count it": none is answered with an error message, because a datagram
// that fails framing or CRC cannot be trusted to name its sender's message.
var (
	// ErrTruncated: the datagram is shorter than its framing requires
	// (CRC trailer, RD header, DDP header).
	ErrTruncated = errors.New("dgram: truncated datagram")
	// ErrBadCRC: the CRC32c trailer does not match the datagram. For
	// counters and local reports it corresponds to the TERMINATE triple
	// iwerr.MPACRCError (LLP layer, code 0x02); see LLPError.
	ErrBadCRC = errors.New("dgram: CRC32c mismatch")
	// ErrVersion: the RD header's version is not RDVersion.
	ErrVersion = errors.New("dgram: unsupported RD header version")
	// ErrBadType: the RD header's type is unknown, or an ACK datagram
	// carries octets after its header.
	ErrBadType = errors.New("dgram: bad RD datagram type")
	// ErrQKey: the datagram's Q_Key is not the receiving QP's (CheckQKey).
	ErrQKey = errors.New("dgram: Q_Key mismatch")
)

// LLPError returns the TERMINATE-vocabulary triple that names err for
// counters and local error reports, if there is one: ErrBadCRC maps to
// iwerr.MPACRCError (the datagram LLP reuses the LLP layer's codes). It is
// never sent to the peer.
func LLPError(err error) (iwerr.Error, bool) {
	if errors.Is(err, ErrBadCRC) {
		return iwerr.MPACRCError, true
	}
	return iwerr.Error{}, false
}

// Datagram is one decoded UDP payload of the datagram profile:
//
//	UD:  keys (8) | DDP segment | CRC32c (4, little-endian)
//	RD:  keys (8) | RD header (24) | DDP segment | CRC32c (4, little-endian)
//	RD ACK: keys (8) | RD header (24) | CRC32c (4, little-endian)
//
// The DDP segment is the RFC 5041 header (whose RsvdULP[0:7] is the RDMAP
// control octet), the RDMAP header if the opcode has one, and the payload;
// no MPA framing, no markers, no pad (docs/wire-format.md).
type Datagram struct {
	Keys  Keys     // the key header
	HasRD bool     // an RD datagram (ParseRD)
	RD    RDHeader // valid when HasRD

	// Segment is the DDP segment, aliasing the parsed buffer. It is empty
	// for an RD ACK datagram and at least one DDP header long otherwise.
	Segment []byte

	CRC         uint32 // the trailer as received (0 from a sender with CRC off)
	ComputedCRC uint32 // the CRC of the datagram, when it was checked
	CRCValid    bool   // the trailer was checked and matched
}

// Checksum returns the CRC32c of the concatenation of pieces: the trailer
// value for a datagram made of them (the key header is the first piece,
// then for RD the encoded RD header). It lets a sender gather headers and registered memory into
// one sendmsg without a staging copy.
func Checksum(pieces ...[]byte) uint32 {
	var c uint32
	for _, p := range pieces {
		c = crc32c.Update(c, p)
	}
	return c
}

// AppendTrailer appends the 4-octet CRC trailer for a datagram made of
// covered: Checksum(covered...) little-endian if crc, else four zero octets.
func AppendTrailer(dst []byte, crc bool, covered ...[]byte) []byte {
	var c uint32
	if crc {
		c = Checksum(covered...)
	}
	return crc32c.Append(dst, c)
}

// AppendUD appends a UD datagram to dst: the key header k, the
// concatenation of the segment pieces (DDP header, RDMAP header, payload,
// ...) and the CRC trailer (zero if !crc). The pieces are copied once,
// straight into dst.
func AppendUD(dst []byte, k Keys, crc bool, segment ...[]byte) []byte {
	start := len(dst)
	dst = k.Append(dst)
	for _, p := range segment {
		dst = append(dst, p...)
	}
	return appendCRC(dst, start, crc)
}

// AppendRD appends an RD datagram to dst: the key header k, rd's header,
// the segment pieces and the CRC trailer, which covers both headers too.
// For an RDAck header pass no segment; for RDData pass one DDP segment.
// AppendRD does not check that the type and the segment agree (ParseRD
// does).
func AppendRD(dst []byte, k Keys, rd *RDHeader, crc bool, segment ...[]byte) []byte {
	start := len(dst)
	dst = k.Append(dst)
	dst = rd.Append(dst)
	for _, p := range segment {
		dst = append(dst, p...)
	}
	return appendCRC(dst, start, crc)
}

func appendCRC(dst []byte, start int, crc bool) []byte {
	var c uint32
	if crc {
		c = crc32c.Checksum(dst[start:])
	}
	return crc32c.Append(dst, c)
}

// checkTrailer splits b into the covered octets and the trailer, checks the
// CRC if asked, and fills d's CRC fields.
func checkTrailer(d *Datagram, b []byte, checkCRC bool) ([]byte, error) {
	body := b[:len(b)-crc32c.Size]
	d.CRC = crc32c.Get(b[len(body):])
	if !checkCRC {
		return body, nil
	}
	d.ComputedCRC = crc32c.Checksum(body)
	if d.ComputedCRC != d.CRC {
		return nil, fmt.Errorf("%w: trailer %#08x, computed %#08x", ErrBadCRC, d.CRC, d.ComputedCRC)
	}
	d.CRCValid = true
	return body, nil
}

// MinSegment is the smallest DDP segment a DATA datagram may carry: the
// tagged DDP header (RFC 5041 §4.2), the shorter of the two. The framing
// layer sits below DDP and judges nothing else of it: whether the header
// its T bit announces is complete, and its version, QN and opcode, are the
// receive path's to check (and to answer with an error message).
const MinSegment = 14

func segment(seg []byte) error {
	if len(seg) < MinSegment {
		return fmt.Errorf("%w: DDP segment of %d octets, need at least %d", ErrTruncated, len(seg), MinSegment)
	}
	return nil
}

// CheckQKey reports ErrQKey unless d's Q_Key is want, the receiving QP's.
func (d *Datagram) CheckQKey(want uint32) error {
	if d.Keys.QKey != want {
		return fmt.Errorf("%w: datagram names %#08x", ErrQKey, d.Keys.QKey)
	}
	return nil
}

// ParseUD decodes a UD datagram (a whole UDP payload). If checkCRC, the
// trailer must match (ErrBadCRC otherwise); if not, it is read but not
// checked, as for a QP with CRC off. On ErrBadCRC the returned Datagram
// holds the key header and the CRC fields (for counters) and no Segment.
// The Q_Key is decoded, not judged: the receiver calls CheckQKey.
func ParseUD(b []byte, checkCRC bool) (Datagram, error) {
	var d Datagram
	if len(b) < KeyHeaderLen+MinSegment+crc32c.Size {
		return d, fmt.Errorf("%w: UD datagram of %d octets, need at least %d", ErrTruncated, len(b), KeyHeaderLen+MinSegment+crc32c.Size)
	}
	d.Keys, _ = ParseKeys(b)
	body, err := checkTrailer(&d, b, checkCRC)
	if err != nil {
		return d, fmt.Errorf("ud: %w", err)
	}
	body = body[KeyHeaderLen:]
	if err := segment(body); err != nil {
		return d, fmt.Errorf("ud: %w", err)
	}
	d.Segment = body
	return d, nil
}

// ParseRD decodes an RD datagram (a whole UDP payload): the key header, the
// RD header, then
// for DATA a DDP segment, for ACK nothing. The CRC, when checked, is judged
// before the header, so a corrupted datagram reports ErrBadCRC rather than a
// framing error.
func ParseRD(b []byte, checkCRC bool) (Datagram, error) {
	d := Datagram{HasRD: true}
	if len(b) < KeyHeaderLen+RDHeaderLen+crc32c.Size {
		return d, fmt.Errorf("%w: RD datagram of %d octets, need at least %d", ErrTruncated, len(b), KeyHeaderLen+RDHeaderLen+crc32c.Size)
	}
	d.Keys, _ = ParseKeys(b)
	body, err := checkTrailer(&d, b, checkCRC)
	if err != nil {
		return d, fmt.Errorf("rd: %w", err)
	}
	body = body[KeyHeaderLen:]
	h, n, err := ParseRDHeader(body)
	d.RD = h
	if err != nil {
		return d, fmt.Errorf("rd: %w", err)
	}
	seg := body[n:]
	switch h.Type {
	case RDAck:
		if len(seg) != 0 {
			return d, fmt.Errorf("rd: %w: ACK datagram carries %d octets after its header", ErrBadType, len(seg))
		}
	case RDData:
		if err := segment(seg); err != nil {
			return d, fmt.Errorf("rd: %w", err)
		}
		d.Segment = seg
	}
	return d, nil
}
