package ddp

import (
	"bytes"
	"encoding/hex"
	"errors"
	"strings"
	"testing"
)

// unhex decodes a hex string that may contain spaces.
func unhex(t testing.TB, s string) []byte {
	t.Helper()
	b, err := hex.DecodeString(strings.ReplaceAll(s, " ", ""))
	if err != nil {
		t.Fatalf("bad hex %q: %v", s, err)
	}
	return b
}

// headerVectors are golden DDP headers. The first three come from
// protocol-notes.md §A.2/§A.6 (tshark-checked FPDUs); the Read Response is
// the one Linux siw sent in captures/host-probe-terminate-bounds.pcap.
var headerVectors = []struct {
	name string
	hex  string
	h    Header
}{
	{
		name: "send MSN 1 (hello iwarp FPDU)",
		hex:  "41 43 00000000 00000000 00000001 00000000",
		h:    Header{Last: true, Version: 1, ULPControl: 0x43, QN: 0, MSN: 1, MO: 0},
	},
	{
		name: "write RTR STag 1 TO 0",
		hex:  "c1 40 00000001 0000000000000000",
		h:    Header{Tagged: true, Last: true, Version: 1, ULPControl: 0x40, Stag: 1, TO: 0},
	},
	{
		name: "read RTR QN 1 MSN 1",
		hex:  "41 41 00000000 00000001 00000001 00000000",
		h:    Header{Last: true, Version: 1, ULPControl: 0x41, QN: 1, MSN: 1},
	},
	{
		name: "siw read response",
		hex:  "c1 42 27de2400 0000559a9fd1d110",
		h:    Header{Tagged: true, Last: true, Version: 1, ULPControl: 0x42, Stag: 0x27de2400, TO: 0x0000559a9fd1d110},
	},
	{
		name: "send with invalidate, middle segment",
		hex:  "01 44 deadbeef 00000000 00000007 00001000",
		h:    Header{Version: 1, ULPControl: 0x44, ULPReserved: 0xdeadbeef, MSN: 7, MO: 0x1000},
	},
	{
		name: "tagged reserved bits kept",
		hex:  "bd 40 ffffffff ffffffffffffffff",
		h:    Header{Tagged: true, Reserved: 0xf, Version: 1, ULPControl: 0x40, Stag: 0xffffffff, TO: ^uint64(0)},
	},
	{
		name: "untagged all ones",
		hex:  "7e ff ffffffff ffffffff ffffffff ffffffff",
		h:    Header{Last: true, Reserved: 0xf, Version: 2, ULPControl: 0xff, ULPReserved: 0xffffffff, QN: 0xffffffff, MSN: 0xffffffff, MO: 0xffffffff},
	},
}

func TestHeaderGolden(t *testing.T) {
	for _, tt := range headerVectors {
		t.Run(tt.name, func(t *testing.T) {
			want := unhex(t, tt.hex)
			got := tt.h.Append(nil)
			if !bytes.Equal(got, want) {
				t.Fatalf("Append = %x, want %x", got, want)
			}
			if tt.h.Len() != len(want) || HeaderLen(want) != len(want) {
				t.Fatalf("Len = %d, HeaderLen = %d, want %d", tt.h.Len(), HeaderLen(want), len(want))
			}
			// Trailing payload is not consumed.
			h, n, err := Parse(append(want, 0xaa, 0xbb, 0xcc))
			if err != nil || n != len(want) || h != tt.h {
				t.Fatalf("Parse = %+v, %d, %v; want %+v, %d", h, n, err, tt.h, len(want))
			}
		})
	}
}

func TestHeaderConstants(t *testing.T) {
	if TaggedHeaderLen != 14 || UntaggedHeaderLen != 18 || Version != 1 {
		t.Fatalf("constants %d %d %d", TaggedHeaderLen, UntaggedHeaderLen, Version)
	}
	if HeaderLen(nil) != 0 {
		t.Fatal("HeaderLen(nil) != 0")
	}
}

func TestHeaderAppendKeepsPrefix(t *testing.T) {
	h := Header{Tagged: true, Last: true, Version: Version, Stag: 9, TO: 10}
	prefix := []byte{1, 2, 3}
	b := h.Append(prefix)
	if !bytes.Equal(b[:3], []byte{1, 2, 3}) || len(b) != 3+TaggedHeaderLen {
		t.Fatalf("Append(prefix) = %x", b)
	}
}

func TestHeaderRoundTrip(t *testing.T) {
	for _, h := range []Header{
		{Version: Version},
		{Tagged: true, Version: Version},
		{Tagged: true, Last: true, Version: Version, ULPControl: 0x40, Stag: 0x12345678, TO: 0x0102030405060708},
		{Last: true, Version: Version, ULPControl: 0x47, QN: 2, MSN: 0xffffffff, MO: 0x7fffffff},
	} {
		b := h.Append(nil)
		got, n, err := Parse(b)
		if err != nil || n != len(b) || got != h {
			t.Errorf("round trip %+v: got %+v, %d, %v", h, got, n, err)
		}
	}
}

func TestHeaderTruncated(t *testing.T) {
	for _, tt := range headerVectors {
		full := unhex(t, tt.hex)
		for i := range full {
			_, n, err := Parse(full[:i])
			if !errors.Is(err, ErrTruncated) || n != 0 {
				t.Fatalf("%s prefix %d: n=%d err=%v, want ErrTruncated", tt.name, i, n, err)
			}
		}
	}
}

func FuzzParse(f *testing.F) {
	for _, tt := range headerVectors {
		f.Add(unhex(f, tt.hex))
	}
	f.Add([]byte{})
	f.Add([]byte{0x80})
	f.Fuzz(func(t *testing.T, b []byte) {
		h, n, err := Parse(b)
		if err != nil {
			if n != 0 {
				t.Fatalf("n=%d with error", n)
			}
			return
		}
		if n != h.Len() || n > len(b) {
			t.Fatalf("n=%d Len=%d len(b)=%d", n, h.Len(), len(b))
		}
		// Every header field is kept, so the encoding round-trips exactly.
		if enc := h.Append(nil); !bytes.Equal(enc, b[:n]) {
			t.Fatalf("Append(Parse(%x)) = %x", b[:n], enc)
		}
	})
}
