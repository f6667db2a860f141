package rdmap

import (
	"bytes"
	"encoding/hex"
	"errors"
	"strings"
	"testing"
)

// rdmapHex decodes a hex string that may contain spaces.
func rdmapHex(t testing.TB, s string) []byte {
	t.Helper()
	b, err := hex.DecodeString(strings.ReplaceAll(s, " ", ""))
	if err != nil {
		t.Fatalf("bad hex %q: %v", s, err)
	}
	return b
}

var readRequestVectors = []struct {
	name string
	hex  string
	rr   ReadRequest
}{
	// protocol-notes.md §A.2 Read RTR: sink 0/0, size 0, source STag 1, TO 0.
	{"read RTR", "00000000 0000000000000000 00000000 00000001 0000000000000000",
		ReadRequest{SourceStag: 1}},
	// Linux siw's Read Request in captures/host-probe-terminate-bounds.pcap
	// (frame 9).
	{"siw capture", "27de2400 0000559a9fd1d110 00000064 11110000 00007f0000100000",
		ReadRequest{SinkStag: 0x27de2400, SinkTO: 0x559a9fd1d110, Size: 100, SourceStag: 0x11110000, SourceTO: 0x7f0000100000}},
	{"byte order", "01020304 05060708090a0b0c 0d0e0f10 11121314 15161718191a1b1c",
		ReadRequest{0x01020304, 0x05060708090a0b0c, 0x0d0e0f10, 0x11121314, 0x15161718191a1b1c}},
	{"max", strings.Repeat("ff", 28),
		ReadRequest{0xffffffff, ^uint64(0), 0xffffffff, 0xffffffff, ^uint64(0)}},
}

func TestReadRequestTable(t *testing.T) {
	for _, tt := range readRequestVectors {
		t.Run(tt.name, func(t *testing.T) {
			want := rdmapHex(t, tt.hex)
			if got := tt.rr.Append(nil); !bytes.Equal(got, want) {
				t.Fatalf("Append = %x, want %x", got, want)
			}
			if tt.rr.Len() != len(want) || len(want) != 28 {
				t.Fatalf("Len = %d, want %d", tt.rr.Len(), len(want))
			}
			rr, n, err := ParseReadRequest(append(want, 0xaa))
			if err != nil || n != 28 || rr != tt.rr {
				t.Fatalf("ParseReadRequest = %+v, %d, %v; want %+v", rr, n, err, tt.rr)
			}
		})
	}
}

func TestReadRequestAppendKeepsPrefix(t *testing.T) {
	rr := ReadRequest{Size: 5}
	b := rr.Append([]byte{9})
	if b[0] != 9 || len(b) != 29 {
		t.Fatalf("Append(prefix) = %x", b)
	}
}

func TestReadRequestTruncated(t *testing.T) {
	full := rdmapHex(t, readRequestVectors[1].hex)
	for i := range full {
		_, n, err := ParseReadRequest(full[:i])
		if !errors.Is(err, ErrReadRequestTruncated) || n != 0 {
			t.Fatalf("prefix %d: n=%d err=%v", i, n, err)
		}
	}
}

func FuzzParseReadRequest(f *testing.F) {
	for _, tt := range readRequestVectors {
		f.Add(rdmapHex(f, tt.hex))
	}
	f.Add([]byte{1, 2, 3})
	f.Fuzz(func(t *testing.T, b []byte) {
		rr, n, err := ParseReadRequest(b)
		if err != nil {
			if n != 0 || len(b) >= ReadRequestLen {
				t.Fatalf("n=%d err=%v for %d bytes", n, err, len(b))
			}
			return
		}
		if n != ReadRequestLen {
			t.Fatalf("n = %d", n)
		}
		if enc := rr.Append(nil); !bytes.Equal(enc, b[:n]) {
			t.Fatalf("Append(Parse(%x)) = %x", b[:n], enc)
		}
	})
}
