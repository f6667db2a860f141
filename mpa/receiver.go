package mpa

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"

	"github.com/iwarpd/iwarpd/internal/crc32c"
	"github.com/iwarpd/iwarpd/iwerr"
)

// Receiver is the resumable receive path for one direction of one stream.
// It reads FPDUs from an io.Reader (typically a non-blocking socket) in three
// steps, so that the payload lands straight in its destination:
//
//  1. ReadHeader(r, hdr) reads ULPDU_Length and the first len(hdr) octets of
//     the ULPDU (at most ULPDU_Length) into hdr; pass room for the smallest
//     DDP header (14 octets), look at it, and read the rest of a longer
//     header with ReadPayload.
//  2. ReadPayload(r, dst) places the next ULPDU octets into dst.
//  3. Finish(r) skips any ULPDU octets not read, reads PAD and CRC and
//     checks the CRC.
//
// Markers are stripped and checked on the way; the CRC is computed over
// what passes through. Any call may return an error from r (such as EAGAIN)
// after consuming some octets: the state is kept, and the same call made
// again later continues where it stopped. ReadHeader must be given the same
// hdr buffer until it succeeds; ReadPayload returns the octets it placed, so
// the caller continues with dst[n:]. Errors of r are returned unwrapped
// (io.EOF before the first octet of an FPDU; io.ErrUnexpectedEOF inside
// one). A marker mismatch is sticky: the stream is unusable afterwards. A
// CRC error (wrapping iwerr.MPACRCError) is returned by Finish once the
// whole FPDU is consumed; the stream stays framed.
//
// Receiver allocates nothing. It is not safe for concurrent use.
type Receiver struct {
	crc, markers bool
	pos          uint64 // stream position of the next octet

	// Current FPDU.
	active     bool   // octets of an FPDU have been consumed or expected
	start      uint64 // stream position of its first octet
	lpos       int    // logical octets consumed (markers excluded)
	ulen       int    // ULPDU_Length, valid when lpos >= 2
	headerDone bool   // ReadHeader succeeded
	sum        uint32 // running CRC32c
	markerGot  int    // octets of the current marker read
	marker     [MarkerLen]byte
	lenField   [LengthFieldLen]byte
	crcField   [CRCLen]byte
	scratch    [64]byte

	err error // sticky protocol error
}

// NewReceiver returns a Receiver at stream position 0. crc: CRC was
// negotiated (else the CRC field is read and ignored). markers: the peer
// inserts markers into this direction.
func NewReceiver(crc, markers bool) *Receiver { return &Receiver{crc: crc, markers: markers} }

// StreamPos returns the stream position of the next octet to read.
func (r *Receiver) StreamPos() uint64 { return r.pos }

// SetStreamPos moves the stream position; only valid between FPDUs.
func (r *Receiver) SetStreamPos(pos uint64) { r.pos = pos }

// Remaining returns the number of ULPDU octets not yet read from the current
// FPDU (0 before ReadHeader succeeds).
func (r *Receiver) Remaining() int {
	if !r.headerDone {
		return 0
	}
	return LengthFieldLen + r.ulen - r.lpos
}

// maxEmptyReads bounds consecutive (0, nil) reads, as bufio does.
const maxEmptyReads = 100

// ReadHeader starts the next FPDU: it reads ULPDU_Length and then
// min(len(hdr), ULPDU_Length) ULPDU octets into hdr, and returns
// ULPDU_Length.
func (r *Receiver) ReadHeader(rd io.Reader, hdr []byte) (int, error) {
	if r.err != nil {
		return 0, r.err
	}
	if r.headerDone {
		return 0, fmt.Errorf("mpa: receiver: ReadHeader before Finish: %w", ErrState)
	}
	if !r.active {
		r.active, r.start, r.lpos, r.sum, r.markerGot = true, r.pos, 0, 0, 0
	}
	if r.lpos < LengthFieldLen {
		_, err := r.readLogical(rd, r.lenField[r.lpos:])
		if r.lpos == LengthFieldLen {
			// Set even when err reports a stop after the last octet.
			r.ulen = int(binary.BigEndian.Uint16(r.lenField[:]))
		}
		if err != nil {
			return 0, err
		}
	}
	want := min(len(hdr), r.ulen)
	if got := r.lpos - LengthFieldLen; got < want {
		if _, err := r.readLogical(rd, hdr[got:want]); err != nil {
			return 0, err
		}
	}
	r.headerDone = true
	return r.ulen, nil
}

// ReadPayload reads up to len(dst) further ULPDU octets (never beyond the
// ULPDU) into dst and returns how many it placed, with an error of r if it
// stopped early. It returns 0, nil when the ULPDU is exhausted.
func (r *Receiver) ReadPayload(rd io.Reader, dst []byte) (int, error) {
	if r.err != nil {
		return 0, r.err
	}
	if !r.headerDone {
		return 0, fmt.Errorf("mpa: receiver: ReadPayload before ReadHeader: %w", ErrState)
	}
	if rem := r.Remaining(); len(dst) > rem {
		dst = dst[:rem]
	}
	return r.readLogical(rd, dst)
}

// Finish consumes the rest of the FPDU (unread ULPDU octets are discarded),
// PAD and CRC, and checks the CRC. After it returns nil or a CRC error the
// Receiver is ready for the next ReadHeader.
func (r *Receiver) Finish(rd io.Reader) error {
	if r.err != nil {
		return r.err
	}
	if !r.headerDone {
		return fmt.Errorf("mpa: receiver: Finish before ReadHeader: %w", ErrState)
	}
	crcStart := LengthFieldLen + r.ulen + PadLen(r.ulen)
	for r.lpos < crcStart {
		k := min(crcStart-r.lpos, len(r.scratch))
		if _, err := r.readLogical(rd, r.scratch[:k]); err != nil {
			return err
		}
	}
	if got := r.lpos - crcStart; got < CRCLen {
		if _, err := r.readLogical(rd, r.crcField[got:]); err != nil {
			return err
		}
	}
	start, sum := r.start, r.sum
	r.active, r.headerDone = false, false
	if !r.crc {
		return nil
	}
	if wire := crc32c.Get(r.crcField[:]); wire != sum {
		return fmt.Errorf("mpa: fpdu at stream position %d: CRC 0x%08x, computed 0x%08x: %w", start, wire, sum, iwerr.MPACRCError)
	}
	return nil
}

// covered reports whether the logical octet at r.lpos, or a marker in front
// of it, is covered by the CRC.
func (r *Receiver) covered(marker bool) bool {
	if r.lpos < LengthFieldLen {
		return true
	}
	crcStart := LengthFieldLen + r.ulen + PadLen(r.ulen)
	return r.lpos < crcStart || marker && r.lpos == crcStart
}

// readLogical fills dst with the next logical octets of the current FPDU
// (the caller keeps dst within one region: length, ULPDU, PAD or CRC),
// reading and checking markers on the way.
func (r *Receiver) readLogical(rd io.Reader, dst []byte) (int, error) {
	n, empty := 0, 0
	for n < len(dst) {
		if r.markers && (r.markerGot > 0 || r.pos%MarkerInterval == 0) {
			m, err := rd.Read(r.marker[r.markerGot:])
			if m > 0 {
				if r.crc && r.covered(true) {
					r.sum = crc32c.Update(r.sum, r.marker[r.markerGot:r.markerGot+m])
				}
				r.markerGot += m
				r.pos += uint64(m)
				empty = 0
				if r.markerGot == MarkerLen {
					r.markerGot = 0
					if err := r.checkMarker(); err != nil {
						return n, err
					}
				}
			}
			if err != nil {
				return n, r.readErr(err)
			}
			if m == 0 {
				if empty++; empty >= maxEmptyReads {
					return n, io.ErrNoProgress
				}
			}
			continue
		}
		k := len(dst) - n
		if r.markers {
			k = min(k, MarkerInterval-int(r.pos%MarkerInterval))
		}
		m, err := rd.Read(dst[n : n+k])
		if m > 0 {
			if r.crc && r.covered(false) {
				r.sum = crc32c.Update(r.sum, dst[n:n+m])
			}
			n += m
			r.lpos += m
			r.pos += uint64(m)
			empty = 0
		}
		if err != nil {
			if n == len(dst) && errors.Is(err, io.EOF) {
				return n, nil // the next call sees EOF again
			}
			return n, r.readErr(err)
		}
		if m == 0 {
			if empty++; empty >= maxEmptyReads {
				return n, io.ErrNoProgress
			}
		}
	}
	return n, nil
}

func (r *Receiver) checkMarker() error {
	pos := r.pos - MarkerLen
	got := binary.BigEndian.Uint16(r.marker[2:4])
	if want := expectedFPDUPTR(r.start, pos); got != want {
		r.err = fmt.Errorf("mpa: marker at stream position %d: FPDUPTR %d, ULPDU_Length framing says %d: %w",
			pos, got, want, iwerr.MPAMarkerMismatch)
		return r.err
	}
	return nil
}

// readErr maps io.EOF inside an FPDU to io.ErrUnexpectedEOF.
func (r *Receiver) readErr(err error) error {
	if err == io.EOF && r.pos != r.start {
		return io.ErrUnexpectedEOF
	}
	return err
}
