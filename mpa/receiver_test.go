package mpa

import (
	"bytes"
	"errors"
	"io"
	"math/rand/v2"
	"testing"

	"github.com/iwarpd/iwarpd/iwerr"
)

// errWouldBlock stands for EAGAIN from a non-blocking socket.
var errWouldBlock = errors.New("would block")

// chunkReader returns at most the next chunk size octets per Read, and
// interleaves would-block errors: sometimes alone, sometimes with data.
type chunkReader struct {
	b     []byte
	rng   *rand.Rand
	max   int // largest chunk; 1 = one octet at a time
	block bool
	reads int
}

func (c *chunkReader) Read(p []byte) (int, error) {
	c.reads++
	if len(c.b) == 0 {
		return 0, io.EOF
	}
	if c.block && c.rng.IntN(3) == 0 {
		return 0, errWouldBlock
	}
	n := min(len(p), len(c.b), 1+c.rng.IntN(c.max))
	copy(p, c.b[:n])
	c.b = c.b[n:]
	if c.block && c.rng.IntN(4) == 0 {
		return n, errWouldBlock
	}
	return n, nil
}

// receiveAll drives r over rd the way the daemon would, retrying on
// errWouldBlock, and returns the ULPDUs and the first other error.
func receiveAll(t testing.TB, r *Receiver, rd io.Reader, count int) ([][]byte, error) {
	var out [][]byte
	retry := func(err error) bool { return errors.Is(err, errWouldBlock) }
	for range count {
		hdr := make([]byte, 14)
		var ulen int
		var err error
		for {
			ulen, err = r.ReadHeader(rd, hdr)
			if !retry(err) {
				break
			}
		}
		if err != nil {
			return out, err
		}
		u := make([]byte, ulen)
		got := copy(u, hdr[:min(ulen, 14)])
		if r.Remaining() != ulen-got {
			t.Fatalf("Remaining %d, want %d", r.Remaining(), ulen-got)
		}
		for got < ulen {
			n, err := r.ReadPayload(rd, u[got:])
			got += n
			if err != nil && !retry(err) {
				return out, err
			}
		}
		for {
			err = r.Finish(rd)
			if !retry(err) {
				break
			}
		}
		out = append(out, u)
		if err != nil {
			return out, err
		}
	}
	return out, nil
}

func TestReceiverEveryOffset(t *testing.T) {
	sizes := []int{30, 0, 505, 14, 1100, 3}
	rng := rand.New(rand.NewPCG(7, 8))
	for off := range uint64(512) {
		for _, markers := range []bool{false, true} {
			for _, crcOn := range []bool{false, true} {
				s := NewSender(crcOn, markers)
				s.SetStreamPos(off)
				var stream []byte
				for i, n := range sizes {
					stream = s.AppendFPDU(stream, pattern(n, byte(i)))
				}
				for _, maxChunk := range []int{1, 7, 600} {
					r := NewReceiver(crcOn, markers)
					r.SetStreamPos(off)
					rd := &chunkReader{b: stream, rng: rng, max: maxChunk, block: maxChunk != 1}
					got, err := receiveAll(t, r, rd, len(sizes))
					if err != nil {
						t.Fatalf("off %d markers %t crc %t chunk %d: %v", off, markers, crcOn, maxChunk, err)
					}
					for i, n := range sizes {
						if !bytes.Equal(got[i], pattern(n, byte(i))) {
							t.Fatalf("off %d markers %t crc %t chunk %d: ULPDU %d differs", off, markers, crcOn, maxChunk, i)
						}
					}
					if r.StreamPos() != s.StreamPos() {
						t.Fatalf("stream pos %d, sender %d", r.StreamPos(), s.StreamPos())
					}
					h := make([]byte, 14)
					if _, err := r.ReadHeader(rd, h); err != io.EOF {
						t.Fatalf("after last FPDU: %v, want io.EOF", err)
					}
				}
			}
		}
	}
}

func TestReceiverGolden(t *testing.T) {
	var stream []byte
	for _, g := range goldenFPDUs {
		stream = append(stream, unhex(t, g.wire)...)
	}
	r := NewReceiver(true, false)
	got, err := receiveAll(t, r, &chunkReader{b: stream, rng: rand.New(rand.NewPCG(1, 1)), max: 1}, len(goldenFPDUs))
	if err != nil {
		t.Fatal(err)
	}
	for i, g := range goldenFPDUs {
		if want := append(unhex(t, g.hdr), unhex(t, g.pay)...); !bytes.Equal(got[i], want) {
			t.Fatalf("%s: % x", g.name, got[i])
		}
	}
}

func TestReceiverCRCErrorKeepsFraming(t *testing.T) {
	for _, markers := range []bool{false, true} {
		s := NewSender(true, markers)
		stream := s.AppendFPDU(nil, pattern(700, 1))
		second := len(stream)
		stream = s.AppendFPDU(stream, pattern(40, 2))
		stream[100] ^= 0x10 // inside the first ULPDU
		r := NewReceiver(true, markers)
		rd := bytes.NewReader(stream)
		_, err := receiveAll(t, r, rd, 1)
		if !errors.Is(err, iwerr.MPACRCError) {
			t.Fatalf("markers %t: %v, want CRC error", markers, err)
		}
		if r.StreamPos() != uint64(second) {
			t.Fatalf("pos %d, want %d", r.StreamPos(), second)
		}
		got, err := receiveAll(t, r, rd, 1)
		if err != nil || !bytes.Equal(got[0], pattern(40, 2)) {
			t.Fatalf("next FPDU: %v", err)
		}
		// Without CRC the corruption goes unnoticed by MPA.
		r = NewReceiver(false, markers)
		if _, err := receiveAll(t, r, bytes.NewReader(stream), 2); err != nil {
			t.Fatalf("crc off: %v", err)
		}
	}
}

func TestReceiverMarkerMismatchSticky(t *testing.T) {
	stream := NewSender(true, true).AppendFPDU(nil, pattern(900, 1))
	stream[515] ^= 4 // FPDUPTR of the marker at 512
	r := NewReceiver(true, true)
	rd := bytes.NewReader(stream)
	_, err := receiveAll(t, r, rd, 1)
	if !errors.Is(err, iwerr.MPAMarkerMismatch) {
		t.Fatalf("%v", err)
	}
	if err := r.Finish(rd); !errors.Is(err, iwerr.MPAMarkerMismatch) {
		t.Fatalf("not sticky: %v", err)
	}
}

func TestReceiverEOFAndState(t *testing.T) {
	stream := NewSender(true, false).AppendFPDU(nil, pattern(50, 1))
	r := NewReceiver(true, false)
	h := make([]byte, 14)
	if _, err := r.ReadPayload(bytes.NewReader(stream), h); !errors.Is(err, ErrState) {
		t.Fatalf("ReadPayload first: %v", err)
	}
	if err := r.Finish(bytes.NewReader(stream)); !errors.Is(err, ErrState) {
		t.Fatalf("Finish first: %v", err)
	}
	if _, err := r.ReadHeader(bytes.NewReader(nil), h); err != io.EOF {
		t.Fatalf("empty: %v", err)
	}
	for cut := 1; cut < len(stream); cut++ {
		r := NewReceiver(true, false)
		_, err := receiveAll(t, r, bytes.NewReader(stream[:cut]), 1)
		if !errors.Is(err, io.ErrUnexpectedEOF) {
			t.Fatalf("cut %d: %v", cut, err)
		}
	}
	// ReadHeader twice without Finish is a caller error; Finish skips the
	// unread payload.
	rd := bytes.NewReader(append(bytes.Clone(stream), stream...))
	if n, err := r.ReadHeader(rd, h); err != nil || n != 50 {
		t.Fatalf("%d %v", n, err)
	}
	if _, err := r.ReadHeader(rd, h); !errors.Is(err, ErrState) {
		t.Fatalf("second ReadHeader: %v", err)
	}
	if err := r.Finish(rd); err != nil {
		t.Fatal(err)
	}
	if n, err := r.ReadHeader(rd, h[:0]); err != nil || n != 50 || r.Remaining() != 50 {
		t.Fatalf("%d %v", n, err)
	}
	big := make([]byte, 100)
	if n, err := r.ReadPayload(rd, big); n != 50 || err != nil || !bytes.Equal(big[:50], pattern(50, 1)) {
		t.Fatalf("ReadPayload beyond ULPDU: %d %v", n, err)
	}
	if n, err := r.ReadPayload(rd, big); n != 0 || err != nil {
		t.Fatalf("exhausted: %d %v", n, err)
	}
	if err := r.Finish(rd); err != nil {
		t.Fatal(err)
	}
}

type emptyReader struct{}

func (emptyReader) Read([]byte) (int, error) { return 0, nil }

func TestReceiverNoProgress(t *testing.T) {
	r := NewReceiver(false, false)
	if _, err := r.ReadHeader(emptyReader{}, nil); !errors.Is(err, io.ErrNoProgress) {
		t.Fatalf("%v", err)
	}
}

func FuzzReceiver(f *testing.F) {
	for _, markers := range []bool{false, true} {
		s := NewSender(true, markers)
		s.SetStreamPos(500)
		b := s.AppendFPDU(nil, pattern(30, 1))
		b = s.AppendFPDU(b, pattern(700, 2))
		f.Add(b, uint16(500), uint64(12345), true, markers)
	}
	f.Add(unhex(f, goldenFPDUs[0].wire), uint16(0), uint64(1), true, false)
	f.Fuzz(func(t *testing.T, b []byte, pos uint16, seed uint64, crcOn, markers bool) {
		rng := rand.New(rand.NewPCG(seed, 0))
		r := NewReceiver(crcOn, markers)
		r.SetStreamPos(uint64(pos))
		rd := &chunkReader{b: b, rng: rng, max: 1 + int(seed%97), block: seed&1 == 1}
		rest := b
		at := uint64(pos)
		for i := 0; i < 64 && len(rest) > 0; i++ {
			want, perr := ParseFPDU(rest, at, crcOn, markers)
			got, rerr := receiveAll(t, r, rd, 1)
			if perr != nil {
				if rerr == nil {
					t.Fatalf("ParseFPDU: %v, Receiver succeeded", perr)
				}
				return
			}
			if (rerr != nil) != (want.Err() != nil) {
				t.Fatalf("ParseFPDU crc err %v, Receiver %v", want.Err(), rerr)
			}
			if len(got) != 1 || !bytes.Equal(got[0], want.ULPDU) {
				t.Fatalf("ULPDU differs")
			}
			rest = rest[want.WireLen:]
			at += uint64(want.WireLen)
			if r.StreamPos() != at {
				t.Fatalf("stream pos %d, want %d", r.StreamPos(), at)
			}
		}
	})
}
