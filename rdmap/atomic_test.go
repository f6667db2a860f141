package rdmap

import (
	"bytes"
	"encoding/hex"
	"errors"
	"testing"
)

// The RFC 7306 layouts, octet by octet (big-endian fields in the order of
// the RFC's diagrams, as Wireshark 4.0's iwarp_rdma.atomic.* fields read
// them).
var (
	goldenAtomicFetchAdd = AtomicRequest{Op: AtomicFetchAdd, ReqID: 0x01020304, Stag: 0x00001a05,
		TO: 0x00007f0000001000, AddSwap: 1}
	goldenAtomicFetchAddHex = "00000000" + "01020304" + "00001a05" + "00007f0000001000" +
		"0000000000000001" + "0000000000000000" + "0000000000000000" + "0000000000000000"
	goldenAtomicCmpSwap = AtomicRequest{Op: AtomicCmpSwap, ReqID: 0xfffffffe, Stag: 0xdeadbe01,
		TO: 0x10, AddSwap: 0x1122334455667788, AddSwapMask: ^uint64(0), Compare: 0x8877665544332211, CompareMask: ^uint64(0)}
	goldenAtomicCmpSwapHex = "00000002" + "fffffffe" + "deadbe01" + "0000000000000010" +
		"1122334455667788" + "ffffffffffffffff" + "8877665544332211" + "ffffffffffffffff"
	goldenAtomicResponse    = AtomicResponse{ReqID: 0x01020304, Original: 0x0000000000000029}
	goldenAtomicResponseHex = "01020304" + "0000000000000029"
)

func TestAtomicGolden(t *testing.T) {
	for _, c := range []struct {
		r   AtomicRequest
		hex string
	}{{goldenAtomicFetchAdd, goldenAtomicFetchAddHex}, {goldenAtomicCmpSwap, goldenAtomicCmpSwapHex}} {
		b := c.r.Append(nil)
		if got := hex.EncodeToString(b); got != c.hex || len(b) != AtomicRequestLen || c.r.Len() != AtomicRequestLen {
			t.Errorf("%v: %s, want %s", c.r.Op, got, c.hex)
		}
		p, n, err := ParseAtomicRequest(b)
		if err != nil || n != AtomicRequestLen || p != c.r {
			t.Errorf("%v: parse %+v %d %v", c.r.Op, p, n, err)
		}
	}
	b := goldenAtomicResponse.Append(nil)
	if got := hex.EncodeToString(b); got != goldenAtomicResponseHex {
		t.Errorf("response %s, want %s", got, goldenAtomicResponseHex)
	}
	if p, n, err := ParseAtomicResponse(b); err != nil || n != AtomicResponseLen || p != goldenAtomicResponse {
		t.Errorf("response parse %+v %d %v", p, n, err)
	}
	d := MakeImmediateData(0xcafef00d)
	if got := hex.EncodeToString(d.Append(nil)); got != "cafef00d00000000" {
		t.Errorf("immediate data %s", got)
	}
	if p, n, err := ParseImmediateData(d.Raw[:]); err != nil || n != 8 || p.Value() != 0xcafef00d {
		t.Errorf("immediate parse %v %d %v", p, n, err)
	}
	if d.Merged() {
		t.Error("a plain Immediate Data reads as merged")
	}
	m := MakeMergedImmediateData(0xcafef00d)
	if got := hex.EncodeToString(m.Append(nil)); got != "cafef00d69774d53" {
		t.Errorf("merged immediate data %s", got)
	}
	if p, _, _ := ParseImmediateData(m.Raw[:]); !p.Merged() || p.Value() != 0xcafef00d {
		t.Errorf("merged immediate parse %v: merged %v", p, p.Merged())
	}
	m.Raw[7] ^= 1
	if m.Merged() {
		t.Error("a damaged tag reads as merged")
	}
	// The reserved bits survive a round trip (a responder checks them).
	r := AtomicRequest{Reserved: 0xabcdef1, Op: AtomicSwap}
	if p, _, _ := ParseAtomicRequest(r.Append(nil)); p.Reserved != r.Reserved || p.Op != AtomicSwap {
		t.Errorf("reserved %+v", p)
	}
}

func TestAtomicTruncated(t *testing.T) {
	full := goldenAtomicCmpSwap.Append(nil)
	for i := range full {
		if _, _, err := ParseAtomicRequest(full[:i]); !errors.Is(err, ErrAtomicRequestTruncated) {
			t.Fatalf("request prefix %d: %v", i, err)
		}
	}
	resp := goldenAtomicResponse.Append(nil)
	for i := range resp {
		if _, _, err := ParseAtomicResponse(resp[:i]); !errors.Is(err, ErrAtomicResponseTruncated) {
			t.Fatalf("response prefix %d: %v", i, err)
		}
	}
	for i := range ImmediateDataLen {
		if _, _, err := ParseImmediateData(make([]byte, i)); !errors.Is(err, ErrImmediateDataTruncated) {
			t.Fatalf("immediate prefix %d: %v", i, err)
		}
	}
}

func TestAtomicApply(t *testing.T) {
	cases := []struct {
		name  string
		r     AtomicRequest
		orig  uint64
		want  uint64
		store bool
	}{
		{"fetchadd", AtomicRequest{Op: AtomicFetchAdd, AddSwap: 5}, 10, 15, true},
		{"fetchadd wraps", AtomicRequest{Op: AtomicFetchAdd, AddSwap: 2}, ^uint64(0), 1, true},
		// Two 32-bit fields: bit 31 ends the low one, so its carry is dropped.
		{"fetchadd masked", AtomicRequest{Op: AtomicFetchAdd, AddSwap: 0x0000000100000001, AddSwapMask: 1 << 31},
			0x00000005ffffffff, 0x0000000600000000, true},
		{"fetchadd 8-bit fields", AtomicRequest{Op: AtomicFetchAdd, AddSwap: 0x0101010101010101, AddSwapMask: 0x8080808080808080},
			0x00ff00ff00ff00ff, 0x0100010001000100, true},
		{"cmpswap equal", AtomicRequest{Op: AtomicCmpSwap, Compare: 7, CompareMask: ^uint64(0), AddSwap: 9, AddSwapMask: ^uint64(0)}, 7, 9, true},
		{"cmpswap differ", AtomicRequest{Op: AtomicCmpSwap, Compare: 7, CompareMask: ^uint64(0), AddSwap: 9, AddSwapMask: ^uint64(0)}, 8, 8, false},
		{"cmpswap masked", AtomicRequest{Op: AtomicCmpSwap, Compare: 0xff07, CompareMask: 0xff, AddSwap: 0xab00, AddSwapMask: 0xff00}, 0x1207, 0xab07, true},
		{"swap masked", AtomicRequest{Op: AtomicSwap, AddSwap: 0xffff, AddSwapMask: 0x0f0f}, 0x1234, 0x1f3f, true},
		{"reserved op", AtomicRequest{Op: 0x5}, 3, 3, false},
	}
	for _, c := range cases {
		got, store := c.r.Apply(c.orig)
		if got != c.want || store != c.store {
			t.Errorf("%s: %#x %v, want %#x %v", c.name, got, store, c.want, c.store)
		}
	}
}

func FuzzParseAtomicRequest(f *testing.F) {
	f.Add(goldenAtomicFetchAdd.Append(nil))
	f.Add(goldenAtomicCmpSwap.Append(nil))
	f.Add([]byte{0xff})
	f.Fuzz(func(t *testing.T, b []byte) {
		r, n, err := ParseAtomicRequest(b)
		if err != nil {
			if len(b) >= AtomicRequestLen {
				t.Fatalf("%d bytes: %v", len(b), err)
			}
			return
		}
		if n != AtomicRequestLen || !bytes.Equal(r.Append(nil), b[:n]) {
			t.Fatalf("round trip %x", b[:n])
		}
		r.Apply(0x0123456789abcdef)
	})
}

func FuzzParseAtomicResponse(f *testing.F) {
	f.Add(goldenAtomicResponse.Append(nil))
	f.Add(make([]byte, 3))
	f.Fuzz(func(t *testing.T, b []byte) {
		r, n, err := ParseAtomicResponse(b)
		if err != nil {
			if len(b) >= AtomicResponseLen {
				t.Fatalf("%d bytes: %v", len(b), err)
			}
			return
		}
		if !bytes.Equal(r.Append(nil), b[:n]) {
			t.Fatalf("round trip %x", b[:n])
		}
	})
}

func FuzzParseImmediateData(f *testing.F) {
	d := MakeImmediateData(42)
	f.Add(d.Append(nil))
	f.Fuzz(func(t *testing.T, b []byte) {
		r, n, err := ParseImmediateData(b)
		if err != nil {
			if len(b) >= ImmediateDataLen {
				t.Fatalf("%d bytes: %v", len(b), err)
			}
			return
		}
		if !bytes.Equal(r.Append(nil), b[:n]) {
			t.Fatalf("round trip %x", b[:n])
		}
	})
}
