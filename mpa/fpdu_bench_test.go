package mpa

import (
	"bytes"
	"testing"

	"github.com/iwarpd/iwarpd/internal/crc32c"
)

// Run: go test -run XXX -bench . -benchtime=200ms ./mpa/
// Compare each FPDU benchmark with BenchmarkCRC32c at the same size: the
// CRC is the floor of any framing with CRC on.

var benchSizes = []struct {
	name string
	n    int // ULPDU octets (64 KiB is capped at MaxULPDU)
}{{"64B", 64}, {"4KiB", 4096}, {"64KiB", MaxULPDU}}

func BenchmarkCRC32c(b *testing.B) {
	for _, sz := range benchSizes {
		buf := pattern(sz.n, 1)
		b.Run(sz.name, func(b *testing.B) {
			b.SetBytes(int64(sz.n))
			var sink uint32
			for b.Loop() {
				sink += crc32c.Checksum(buf)
			}
			_ = sink
		})
	}
}

func BenchmarkFPDUEncode(b *testing.B) {
	for _, markers := range []bool{false, true} {
		for _, sz := range benchSizes {
			name := sz.name
			if markers {
				name += "/markers"
			}
			hdr := make([]byte, 18)
			pay := pattern(sz.n-len(hdr), 1)
			b.Run(name, func(b *testing.B) {
				s := NewSender(true, markers)
				buf := make([]byte, 0, s.WireLen(sz.n)+MarkerLen*2)
				b.SetBytes(int64(sz.n))
				for b.Loop() {
					s.SetStreamPos(0)
					buf = s.AppendFPDU(buf[:0], hdr, pay)
				}
			})
		}
	}
}

// BenchmarkFPDUEncodeVec is the zero-copy gather path (AppendVec): framing
// octets only, the payload is referenced.
func BenchmarkFPDUEncodeVec(b *testing.B) {
	for _, sz := range benchSizes {
		hdr := make([]byte, 18)
		pay := pattern(sz.n-len(hdr), 1)
		b.Run(sz.name, func(b *testing.B) {
			s := NewSender(true, false)
			vec, scratch := make([][]byte, 0, 8), make([]byte, 0, 16)
			b.SetBytes(int64(sz.n))
			for b.Loop() {
				s.SetStreamPos(0)
				vec, scratch = s.AppendVec(vec[:0], scratch[:0], hdr, pay)
			}
		})
	}
}

func BenchmarkFPDUDecode(b *testing.B) {
	for _, sz := range benchSizes {
		u := pattern(sz.n, 1)
		wire := NewSender(true, false).AppendFPDU(nil, u)
		b.Run("ParseFPDU/"+sz.name, func(b *testing.B) {
			b.SetBytes(int64(sz.n))
			for b.Loop() {
				f, err := ParseFPDU(wire, 0, true, false)
				if err != nil || !f.CRCValid {
					b.Fatal(err)
				}
			}
		})
		for _, markers := range []bool{false, true} {
			name := "Receiver/" + sz.name
			if markers {
				name += "/markers"
			}
			stream := NewSender(true, markers).AppendFPDU(nil, u)
			b.Run(name, func(b *testing.B) {
				r := NewReceiver(true, markers)
				rd := bytes.NewReader(stream)
				hdr := make([]byte, 14)
				dst := make([]byte, sz.n)
				b.SetBytes(int64(sz.n))
				for b.Loop() {
					rd.Reset(stream)
					r.SetStreamPos(0)
					if _, err := r.ReadHeader(rd, hdr); err != nil {
						b.Fatal(err)
					}
					if _, err := r.ReadPayload(rd, dst); err != nil {
						b.Fatal(err)
					}
					if err := r.Finish(rd); err != nil {
						b.Fatal(err)
					}
				}
			})
		}
	}
}

// BenchmarkCopyCRC is the floor for paths that must also move the payload
// (AppendFPDU into a buffer, Receiver into dst): one copy plus the CRC.
func BenchmarkCopyCRC(b *testing.B) {
	for _, sz := range benchSizes {
		src := pattern(sz.n, 1)
		dst := make([]byte, sz.n)
		b.Run(sz.name, func(b *testing.B) {
			b.SetBytes(int64(sz.n))
			var sink uint32
			for b.Loop() {
				copy(dst, src)
				sink += crc32c.Checksum(dst)
			}
			_ = sink
		})
	}
}
