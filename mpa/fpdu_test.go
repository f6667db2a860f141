package mpa

import (
	"bytes"
	"encoding/binary"
	"errors"
	"math/rand/v2"
	"testing"

	"github.com/iwarpd/iwarpd/internal/crc32c"
	"github.com/iwarpd/iwarpd/iwerr"
)

// Golden FPDUs from protocol-notes §A.2/§A.5 (CRC on; the Write RTR and the
// Send were checked "Good CRC32" by tshark).
var goldenFPDUs = []struct {
	name string
	hdr  string // DDP/RDMAP headers
	pay  string
	wire string
}{
	{"send hello iwarp",
		"41 43 00 00 00 00 00 00 00 00 00 00 00 01 00 00 00 00", "68 65 6c 6c 6f 20 69 77 61 72 70",
		"00 1d 41 43 00 00 00 00 00 00 00 00 00 00 00 01 00 00 00 00 68 65 6c 6c 6f 20 69 77 61 72 70 00 cf 69 6c 1e"},
	{"write rtr", "c1 40 00 00 00 01 00 00 00 00 00 00 00 00", "",
		"00 0e c1 40 00 00 00 01 00 00 00 00 00 00 00 00 eb d3 4c 5f"},
	{"send rtr", "41 43 00 00 00 00 00 00 00 00 00 00 00 01 00 00 00 00", "",
		"00 12 41 43 00 00 00 00 00 00 00 00 00 00 00 01 00 00 00 00 58 7b e8 c4"},
	{"read rtr", "41 41 00 00 00 00 00 00 00 01 00 00 00 01 00 00 00 00", "00 00 00 00 | 00 00 00 00 00 00 00 00 | 00 00 00 00 | 00 00 00 01 | 00 00 00 00 00 00 00 00",
		"00 2e 41 41 00 00 00 00 00 00 00 01 00 00 00 01 00 00 00 00 | 00 00 00 00 | 00 00 00 00 00 00 00 00 | 00 00 00 00 | 00 00 00 01 | 00 00 00 00 00 00 00 00 | ba 10 e3 c9"},
}

func TestFPDUGolden(t *testing.T) {
	for _, g := range goldenFPDUs {
		t.Run(g.name, func(t *testing.T) {
			hdr, pay, wire := unhex(t, g.hdr), unhex(t, g.pay), unhex(t, g.wire)
			s := NewSender(true, false)
			if got := s.WireLen(len(hdr) + len(pay)); got != len(wire) {
				t.Fatalf("WireLen = %d, want %d", got, len(wire))
			}
			got := s.AppendFPDU(nil, hdr, pay)
			if !bytes.Equal(got, wire) {
				t.Fatalf("AppendFPDU =\n% x\nwant\n% x", got, wire)
			}
			if s.StreamPos() != uint64(len(wire)) {
				t.Fatalf("StreamPos = %d", s.StreamPos())
			}
			f, err := ParseFPDU(wire, 0, true, false)
			if err != nil {
				t.Fatal(err)
			}
			if !f.CRCValid || f.Err() != nil || f.WireLen != len(wire) || !bytes.Equal(f.ULPDU, append(hdr, pay...)) || !f.PadZero {
				t.Fatalf("ParseFPDU = %+v", f)
			}
			if f.CRC != binary.LittleEndian.Uint32(wire[len(wire)-4:]) || f.ComputedCRC != f.CRC {
				t.Fatalf("CRC %08x computed %08x", f.CRC, f.ComputedCRC)
			}
			// CRC off: the field is zero and the rest identical.
			off := NewSender(false, false).AppendFPDU(nil, hdr, pay)
			if !bytes.Equal(off[:len(off)-4], wire[:len(wire)-4]) || binary.LittleEndian.Uint32(off[len(off)-4:]) != 0 {
				t.Fatalf("crc off: % x", off)
			}
		})
	}
}

func TestPadLenFPDULenMULPDU(t *testing.T) {
	for _, tt := range []struct{ n, pad, fpdu int }{{0, 2, 8}, {1, 1, 8}, {2, 0, 8}, {3, 3, 12}, {14, 0, 20}, {29, 1, 36}, {65535, 3, 65544}} {
		if p, l := PadLen(tt.n), FPDULen(tt.n); p != tt.pad || l != tt.fpdu {
			t.Errorf("n=%d: PadLen %d FPDULen %d, want %d %d", tt.n, p, l, tt.pad, tt.fpdu)
		}
	}
	for _, tt := range []struct {
		emss    int
		markers bool
		want    int
	}{
		{1460, false, 1454}, {1460, true, 1442}, {1461, false, 1454}, {1463, false, 1454},
		{1448, false, 1442}, {1448, true, 1430}, {512, true, 502}, {513, true, 498},
		{9000, false, 8994}, {65483, false, 65474}, {70000, false, MaxULPDU}, {5, false, 0}, {0, true, 0},
	} {
		got := MULPDU(tt.emss, tt.markers)
		if got != tt.want {
			t.Errorf("MULPDU(%d, %t) = %d, want %d", tt.emss, tt.markers, got, tt.want)
		}
		if got > 0 && got < MaxULPDU {
			// The worst-case FPDU (most markers) fits the segment.
			worst := FPDULen(got)
			if tt.markers {
				worst += MarkerLen * ((tt.emss + MarkerInterval - 1) / MarkerInterval)
			}
			if worst > tt.emss {
				t.Errorf("MULPDU(%d, %t) = %d: FPDU of %d octets", tt.emss, tt.markers, got, worst)
			}
		}
	}
}

// refEncode is an octet-at-a-time model of the marker rules, independent of
// the Sender's arithmetic.
func refEncode(pos uint64, crcOn, markers bool, ulpdu []byte) []byte {
	var logical []byte
	logical = binary.BigEndian.AppendUint16(logical, uint16(len(ulpdu)))
	logical = append(logical, ulpdu...)
	logical = append(logical, make([]byte, PadLen(len(ulpdu)))...)
	start := pos
	hdr := start
	if markers && start%512 == 0 {
		hdr += 4
	}
	var out []byte
	emit := func(c byte) {
		if markers && pos%512 == 0 {
			ptr := uint16(pos - hdr)
			if pos == start {
				ptr = 0
			}
			out = append(out, 0, 0, byte(ptr>>8), byte(ptr))
			pos += 4
		}
		out = append(out, c)
		pos++
	}
	for _, c := range logical {
		emit(c)
	}
	if markers && pos%512 == 0 { // marker between PAD and CRC
		out = append(out, 0, 0, byte((pos-hdr)>>8), byte(pos-hdr))
		pos += 4
	}
	var sum uint32
	if crcOn {
		sum = crc32c.Checksum(out)
	}
	var c [4]byte
	binary.LittleEndian.PutUint32(c[:], sum)
	for _, b := range c {
		emit(b)
	}
	return out
}

func pattern(n int, seed byte) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(i*7) + seed
	}
	return b
}

func TestMarkerLayoutByHand(t *testing.T) {
	// A 600-octet ULPDU at stream position 0: leading marker (FPDUPTR 0),
	// ULPDU_Length at 4, a marker at stream position 512 pointing 508 back to
	// ULPDU_Length, and the CRC over everything before it.
	u := pattern(600, 1)
	b := NewSender(true, true).AppendFPDU(nil, u)
	if len(b) != 4+2+600+2+4+4 {
		t.Fatalf("len %d", len(b))
	}
	if !bytes.Equal(b[0:6], []byte{0, 0, 0, 0, 0x02, 0x58}) {
		t.Fatalf("head % x", b[:6])
	}
	if !bytes.Equal(b[512:516], []byte{0, 0, 0x01, 0xfc}) {
		t.Fatalf("marker at 512: % x", b[512:516])
	}
	if !bytes.Equal(b[6:512], u[:506]) || !bytes.Equal(b[516:610], u[506:]) {
		t.Fatal("payload around the marker")
	}
	if got, want := crc32c.Get(b[len(b)-4:]), crc32c.Checksum(b[:len(b)-4]); got != want {
		t.Fatalf("crc %08x want %08x", got, want)
	}
	// A second FPDU starting at 616: its marker at 1024 points 408 back.
	s := NewSender(true, true)
	s.SetStreamPos(616)
	b = s.AppendFPDU(nil, u)
	if !bytes.Equal(b[408:412], []byte{0, 0, 0x01, 0x98}) {
		t.Fatalf("marker at 1024: % x", b[408:412])
	}
	// A marker falling between PAD and CRC: an FPDU starting at 8 with
	// 2 + 502 + 0 octets before its CRC reaches position 512 there.
	s2 := NewSender(true, true)
	s2.SetStreamPos(8)
	b2 := s2.AppendFPDU(nil, pattern(502, 3))
	if len(b2) != 504+4+4 {
		t.Fatalf("len %d", len(b2))
	}
	if !bytes.Equal(b2[504:508], []byte{0, 0, 0x01, 0xf8}) {
		t.Fatalf("marker before CRC: % x", b2[504:508])
	}
	if got, want := crc32c.Get(b2[508:]), crc32c.Checksum(b2[:508]); got != want {
		t.Fatalf("CRC must cover the marker before it: %08x want %08x", got, want)
	}
}

func TestSenderMatchesModelEveryOffset(t *testing.T) {
	sizes := []int{0, 1, 3, 14, 505, 506, 507, 508, 1000, 1442}
	for off := range uint64(512) {
		for _, crcOn := range []bool{false, true} {
			s := NewSender(crcOn, true)
			s.SetStreamPos(512*3 + off)
			for i, n := range sizes {
				u := pattern(n, byte(i))
				pos := s.StreamPos()
				wl := s.WireLen(n)
				got := s.AppendFPDU(nil, u[:n/2], u[n/2:])
				want := refEncode(pos, crcOn, true, u)
				if !bytes.Equal(got, want) {
					t.Fatalf("off %d crc %t n %d: sender and model differ\n% x\n% x", off, crcOn, n, got, want)
				}
				if wl != len(got) || s.StreamPos() != pos+uint64(len(got)) {
					t.Fatalf("off %d n %d: WireLen %d len %d", off, n, wl, len(got))
				}
			}
		}
	}
}

func TestParseFPDUMarkersEveryOffset(t *testing.T) {
	sizes := []int{0, 2, 13, 506, 508, 509, 1020, 1500}
	for off := range uint64(512) {
		for _, crcOn := range []bool{false, true} {
			s := NewSender(crcOn, true)
			s.SetStreamPos(off)
			var stream []byte
			for i, n := range sizes {
				stream = s.AppendFPDU(stream, pattern(n, byte(i)))
			}
			pos := off
			b := stream
			for i, n := range sizes {
				f, err := ParseFPDU(b, pos, crcOn, true)
				if err != nil {
					t.Fatalf("off %d fpdu %d: %v", off, i, err)
				}
				if !bytes.Equal(f.ULPDU, pattern(n, byte(i))) || !f.CRCValid || !f.PadZero || f.ULPDULength != n {
					t.Fatalf("off %d fpdu %d: %+v", off, i, f)
				}
				wantMarkers := 0
				for p := pos; p < pos+uint64(f.WireLen); p++ {
					if p%512 == 0 {
						wantMarkers++
					}
				}
				if len(f.Markers) != wantMarkers {
					t.Fatalf("off %d fpdu %d: %d markers, want %d", off, i, len(f.Markers), wantMarkers)
				}
				for _, m := range f.Markers {
					if m.StreamPos%512 != 0 || m.Reserved != 0 {
						t.Fatalf("marker %+v", m)
					}
				}
				pos += uint64(f.WireLen)
				b = b[f.WireLen:]
			}
			if len(b) != 0 || pos != s.StreamPos() {
				t.Fatalf("off %d: %d left, pos %d vs %d", off, len(b), pos, s.StreamPos())
			}
		}
	}
}

func TestParseFPDUEveryPrefix(t *testing.T) {
	for _, tc := range []struct {
		pos     uint64
		markers bool
		n       int
	}{{0, false, 29}, {0, true, 29}, {0, true, 1000}, {510, true, 1000}, {511, true, 3}, {100, false, 0}} {
		s := NewSender(true, tc.markers)
		s.SetStreamPos(tc.pos)
		b := s.AppendFPDU(nil, pattern(tc.n, 9))
		for i := range len(b) {
			if _, err := ParseFPDU(b[:i], tc.pos, true, tc.markers); !errors.Is(err, ErrTruncated) {
				t.Fatalf("%+v prefix %d/%d: %v", tc, i, len(b), err)
			}
		}
		if f, err := ParseFPDU(append(b, 0xaa, 0xbb), tc.pos, true, tc.markers); err != nil || f.WireLen != len(b) {
			t.Fatalf("%+v full: %v", tc, err)
		}
	}
}

func TestParseFPDUErrors(t *testing.T) {
	wire := unhex(t, goldenFPDUs[0].wire)

	bad := bytes.Clone(wire)
	bad[25] ^= 1
	f, err := ParseFPDU(bad, 0, true, false)
	if err != nil || f.CRCValid || !errors.Is(f.Err(), iwerr.MPACRCError) {
		t.Fatalf("bad CRC: %+v %v", f, err)
	}
	if f, err := ParseFPDU(bad, 0, false, false); err != nil || !f.CRCValid || f.Err() != nil || f.ComputedCRC != 0 {
		t.Fatalf("crc off: %+v %v", f, err)
	}

	pad := bytes.Clone(wire)
	pad[31] = 9
	if f, _ := ParseFPDU(pad, 0, false, false); f.PadZero {
		t.Fatal("non-zero pad not reported")
	}

	s := NewSender(true, true)
	m := s.AppendFPDU(nil, pattern(700, 0))
	for _, at := range []int{3, 515} { // leading marker, mid-FPDU marker
		mm := bytes.Clone(m)
		mm[at] ^= 4
		if _, err := ParseFPDU(mm, 0, true, true); !errors.Is(err, iwerr.MPAMarkerMismatch) {
			t.Fatalf("marker byte %d: %v", at, err)
		}
	}
	mm := bytes.Clone(m)
	mm[0] = 0xff // reserved octets are not checked, but CRC-covered
	if f, err := ParseFPDU(mm, 0, true, true); err != nil || f.Markers[0].Reserved != 0xff00 || f.CRCValid {
		t.Fatalf("reserved: %+v %v", f.Markers, err)
	}
}

func TestAllocs(t *testing.T) {
	hdr := make([]byte, 18)
	pay := pattern(4096, 1)
	for _, markers := range []bool{false, true} {
		s := NewSender(true, markers)
		buf := make([]byte, 0, 8192)
		if n := testing.AllocsPerRun(100, func() { buf = s.AppendFPDU(buf[:0], hdr, pay) }); n != 0 {
			t.Errorf("AppendFPDU markers=%t: %v allocs", markers, n)
		}
	}
	wire := NewSender(true, false).AppendFPDU(nil, hdr, pay)
	if n := testing.AllocsPerRun(100, func() {
		if _, err := ParseFPDU(wire, 0, true, false); err != nil {
			t.Fatal(err)
		}
	}); n != 0 {
		t.Errorf("ParseFPDU: %v allocs", n)
	}
	for _, markers := range []bool{false, true} {
		stream := NewSender(true, markers).AppendFPDU(nil, hdr, pay)
		r := NewReceiver(true, markers)
		rd := bytes.NewReader(stream)
		h := make([]byte, 14)
		dst := make([]byte, 8192)
		if n := testing.AllocsPerRun(100, func() {
			rd.Reset(stream)
			r.SetStreamPos(0)
			if _, err := r.ReadHeader(rd, h); err != nil {
				t.Fatal(err)
			}
			if _, err := r.ReadPayload(rd, dst); err != nil {
				t.Fatal(err)
			}
			if err := r.Finish(rd); err != nil {
				t.Fatal(err)
			}
		}); n != 0 {
			t.Errorf("Receiver markers=%t: %v allocs", markers, n)
		}
	}
}

func TestAppendFPDUPanicsOnOversize(t *testing.T) {
	defer func() {
		if recover() == nil {
			t.Fatal("no panic")
		}
	}()
	NewSender(false, false).AppendFPDU(nil, make([]byte, MaxULPDU), []byte{1})
}

func FuzzParseFPDU(f *testing.F) {
	for _, g := range goldenFPDUs {
		f.Add(unhex(f, g.wire), uint16(0), true, false)
	}
	rng := rand.New(rand.NewPCG(1, 2))
	for _, n := range []int{0, 30, 600, 1100} {
		pos := uint16(rng.IntN(512))
		s := NewSender(true, true)
		s.SetStreamPos(uint64(pos))
		f.Add(s.AppendFPDU(nil, pattern(n, 5)), pos, true, true)
	}
	f.Fuzz(func(t *testing.T, b []byte, pos uint16, crcOn, markers bool) {
		fp, err := ParseFPDU(b, uint64(pos), crcOn, markers)
		if err != nil {
			return
		}
		if fp.WireLen > len(b) || len(fp.ULPDU) != fp.ULPDULength || fp.PadLen != PadLen(fp.ULPDULength) {
			t.Fatalf("inconsistent %+v", fp)
		}
		if !crcOn && !fp.CRCValid {
			t.Fatal("CRCValid false with crc off")
		}
		// Re-encoding a valid FPDU with zero pad and no reserved marker bits
		// reproduces it.
		if !fp.PadZero || !fp.CRCValid || !crcOn {
			return
		}
		for _, m := range fp.Markers {
			if m.Reserved != 0 {
				return
			}
		}
		s := NewSender(crcOn, markers)
		s.SetStreamPos(uint64(pos))
		if got := s.AppendFPDU(nil, fp.ULPDU); !bytes.Equal(got, b[:fp.WireLen]) {
			t.Fatalf("re-encode\n% x\nwant\n% x", got, b[:fp.WireLen])
		}
	})
}

func TestAppendVecMatchesAppendFPDU(t *testing.T) {
	sizes := []int{0, 1, 3, 14, 506, 508, 1000, 1442}
	for off := range uint64(512) {
		for _, markers := range []bool{false, true} {
			for _, crcOn := range []bool{false, true} {
				a, v := NewSender(crcOn, markers), NewSender(crcOn, markers)
				a.SetStreamPos(off)
				v.SetStreamPos(off)
				for i, n := range sizes {
					u := pattern(n, byte(i))
					want := a.AppendFPDU(nil, u[:n/3], u[n/3:])
					vec, _ := v.AppendVec(nil, nil, u[:n/3], u[n/3:])
					if got := bytes.Join(vec, nil); !bytes.Equal(got, want) {
						t.Fatalf("off %d markers %t crc %t n %d:\n% x\nwant\n% x", off, markers, crcOn, n, got, want)
					}
					if v.StreamPos() != a.StreamPos() {
						t.Fatalf("stream pos %d vs %d", v.StreamPos(), a.StreamPos())
					}
				}
			}
		}
	}
	hdr, pay := make([]byte, 18), pattern(4096, 1)
	for _, markers := range []bool{false, true} {
		s := NewSender(true, markers)
		vec, scratch := make([][]byte, 0, 64), make([]byte, 0, 128)
		if n := testing.AllocsPerRun(100, func() { vec, scratch = s.AppendVec(vec[:0], scratch[:0], hdr, pay) }); n != 0 {
			t.Errorf("AppendVec markers=%t: %v allocs", markers, n)
		}
	}
}
