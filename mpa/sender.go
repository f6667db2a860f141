package mpa

import (
	"encoding/binary"
	"fmt"

	"github.com/iwarpd/iwarpd/internal/crc32c"
)

// Sender frames ULPDUs into FPDUs for one direction of one stream. It tracks
// the stream position (octets since the first octet of the first FPDU it
// framed, the marker origin) so that markers land every 512 octets. It is
// not safe for concurrent use.
type Sender struct {
	crc, markers bool
	pos          uint64
}

// NewSender returns a Sender at stream position 0. crc: compute the CRC
// (else the field is sent as zero). markers: the peer asked for markers.
func NewSender(crc, markers bool) *Sender { return &Sender{crc: crc, markers: markers} }

// StreamPos returns the stream position of the next FPDU.
func (s *Sender) StreamPos() uint64 { return s.pos }

// SetStreamPos moves the stream position (for tests and for resuming a
// stream whose origin is known).
func (s *Sender) SetStreamPos(pos uint64) { s.pos = pos }

// WireLen returns the number of octets AppendFPDU would append for a ULPDU of
// n octets at the current stream position, markers included.
func (s *Sender) WireLen(n int) int {
	l := FPDULen(n)
	if s.markers {
		l += MarkerLen * markerCount(firstMarker(s.pos), l)
	}
	return l
}

var zeroPad [3]byte

// AppendFPDU appends one FPDU carrying the concatenation of the ulpdu slices
// (gather: e.g. the DDP/RDMAP header and the payload) to dst, and advances
// the stream position. It allocates nothing when dst has room for WireLen
// more octets. The ULPDU must not exceed MaxULPDU octets (the caller sizes
// segments to MULPDU); AppendFPDU panics otherwise.
func (s *Sender) AppendFPDU(dst []byte, ulpdu ...[]byte) []byte {
	n := 0
	for _, p := range ulpdu {
		n += len(p)
	}
	if n > MaxULPDU {
		panic(fmt.Sprintf("mpa: AppendFPDU: ULPDU of %d octets exceeds %d", n, MaxULPDU))
	}
	start := len(dst)
	pad := PadLen(n)
	if !s.markers {
		dst = binary.BigEndian.AppendUint16(dst, uint16(n))
		for _, p := range ulpdu {
			dst = append(dst, p...)
		}
		dst = append(dst, zeroPad[:pad]...)
		var sum uint32
		if s.crc {
			sum = crc32c.Checksum(dst[start:])
		}
		dst = crc32c.Append(dst, sum)
		s.pos += uint64(len(dst) - start)
		return dst
	}

	w := markerWriter{b: dst, pos: s.pos, start: s.pos}
	var lf [LengthFieldLen]byte
	binary.BigEndian.PutUint16(lf[:], uint16(n))
	w.put(lf[:])
	for _, p := range ulpdu {
		w.put(p)
	}
	w.put(zeroPad[:pad])
	// A marker due before the first CRC octet is inside the FPDU and
	// covered by the CRC.
	w.markerIfDue()
	var sum uint32
	if s.crc {
		sum = crc32c.Checksum(w.b[start:])
	}
	var c [CRCLen]byte
	binary.LittleEndian.PutUint32(c[:], sum)
	w.put(c[:])
	s.pos = w.pos
	return w.b
}

// AppendVec is AppendFPDU for gather I/O (sendmsg/writev) without copying
// the ULPDU: it appends to vec the slices that make up the FPDU on the wire,
// in order — the ulpdu slices themselves (split where markers fall) and
// framing octets (ULPDU_Length, markers, PAD, CRC) written into scratch — and
// returns the extended vec and scratch. The ulpdu octets must not change
// until the vector is sent. It allocates nothing when vec and scratch have
// room (scratch needs 13 octets plus 4 per marker). Panics like AppendFPDU.
func (s *Sender) AppendVec(vec [][]byte, scratch []byte, ulpdu ...[]byte) ([][]byte, []byte) {
	n := 0
	for _, p := range ulpdu {
		n += len(p)
	}
	if n > MaxULPDU {
		panic(fmt.Sprintf("mpa: AppendVec: ULPDU of %d octets exceeds %d", n, MaxULPDU))
	}
	w := vecWriter{vec: vec, scratch: scratch, crc: s.crc, markers: s.markers, pos: s.pos, start: s.pos}
	w.put(w.framing(binary.BigEndian.AppendUint16(w.scratch, uint16(n))))
	for _, p := range ulpdu {
		w.put(p)
	}
	w.put(w.framing(append(w.scratch, zeroPad[:PadLen(n)]...)))
	if s.markers {
		w.markerIfDue()
	}
	var sum uint32
	if s.crc {
		sum = w.sum
	}
	w.crc = false
	w.put(w.framing(crc32c.Append(w.scratch, sum)))
	s.pos = w.pos
	return w.vec, w.scratch
}

// vecWriter is markerWriter for AppendVec. Framing octets are appended to
// scratch first (so that nothing escapes to the heap), then referenced.
type vecWriter struct {
	vec          [][]byte
	scratch      []byte
	crc, markers bool
	sum          uint32
	pos, start   uint64
}

// framing takes scratch extended with framing octets and returns them.
func (w *vecWriter) framing(extended []byte) []byte {
	i := len(w.scratch)
	w.scratch = extended
	return extended[i:len(extended):len(extended)]
}

// emit appends p to the vector and digests it.
func (w *vecWriter) emit(p []byte) {
	if w.crc {
		w.sum = crc32c.Update(w.sum, p)
	}
	w.vec = append(w.vec, p)
	w.pos += uint64(len(p))
}

func (w *vecWriter) markerIfDue() {
	if w.pos%MarkerInterval == 0 {
		w.emit(w.framing(appendMarker(w.scratch, expectedFPDUPTR(w.start, w.pos))))
	}
}

func (w *vecWriter) put(p []byte) {
	for len(p) > 0 {
		k := len(p)
		if w.markers {
			w.markerIfDue()
			k = min(k, MarkerInterval-int(w.pos%MarkerInterval))
		}
		w.emit(p[:k])
		p = p[k:]
	}
}

// markerWriter appends logical FPDU octets, inserting a marker before every
// octet whose stream position is a multiple of 512.
type markerWriter struct {
	b          []byte
	pos, start uint64 // next stream position; FPDU start
}

func (w *markerWriter) markerIfDue() {
	if w.pos%MarkerInterval == 0 {
		w.b = appendMarker(w.b, expectedFPDUPTR(w.start, w.pos))
		w.pos += MarkerLen
	}
}

func (w *markerWriter) put(p []byte) {
	for len(p) > 0 {
		w.markerIfDue()
		k := min(len(p), MarkerInterval-int(w.pos%MarkerInterval))
		w.b = append(w.b, p[:k]...)
		w.pos += uint64(k)
		p = p[k:]
	}
}
