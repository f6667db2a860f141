package dgram

import (
	"bytes"
	"errors"
	"testing"
)

func TestRDHeaderTable(t *testing.T) {
	tests := []struct {
		name string
		h    RDHeader
		hex  string
	}{
		{"data with piggybacked ack", goldenRDData,
			"11 80 0080 1a2b3c4d 5e6f7081 00000007 00000005 00000005"},
		{"ack notready", goldenRDAck,
			"12 a0 0040 5e6f7081 1a2b3c4d 00000000 00000008 00000000"},
		{"reset, all flags", RDHeader{Version: 1, Type: RDAck, Flags: FlagAck | FlagAckReq | FlagNotReady | FlagReset,
			Window: 0xffff, Incarnation: 0xffffffff, EchoedIncarnation: 0, CumAck: 0xfffffffe, SACK: 0x80000001},
			"12 f0 ffff ffffffff 00000000 00000000 fffffffe 80000001"},
		{"sack block", RDHeader{Version: 1, Type: RDAck, Flags: FlagAck | FlagExtSACK | FlagSACKBlock, Window: 1024,
			Incarnation: 0x5e6f7081, EchoedIncarnation: 0x1a2b3c4d, Seq: 0x29, CumAck: 8, SACK: 0xfffffffe},
			"12 8c 0400 5e6f7081 1a2b3c4d 00000029 00000008 fffffffe"},
		{"reserved flags kept", RDHeader{Version: 1, Type: RDData, Flags: 0x0f, Seq: 0x01020304},
			"11 0f 0000 00000000 00000000 01020304 00000000 00000000"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			want := mustHex(t, tt.hex)
			got := tt.h.Append(nil)
			if !bytes.Equal(got, want) {
				t.Fatalf("Append:\n got %x\nwant %x", got, want)
			}
			if tt.h.Len() != RDHeaderLen || len(got) != RDHeaderLen {
				t.Fatalf("Len %d, encoded %d", tt.h.Len(), len(got))
			}
			h, n, err := ParseRDHeader(append(want, 0x41, 0x43))
			if err != nil || n != RDHeaderLen || h != tt.h {
				t.Fatalf("ParseRDHeader = %+v, %d, %v; want %+v", h, n, err, tt.h)
			}
		})
	}
}

func TestRDHeaderErrors(t *testing.T) {
	good := goldenRDData.Append(nil)
	for i := range good {
		if _, n, err := ParseRDHeader(good[:i]); !errors.Is(err, ErrTruncated) || n != 0 {
			t.Fatalf("prefix %d: n=%d err=%v, want ErrTruncated", i, n, err)
		}
	}
	for _, v := range []uint8{0, 2, 15} {
		b := bytes.Clone(good)
		b[0] = v<<4 | 1
		if _, _, err := ParseRDHeader(b); !errors.Is(err, ErrVersion) {
			t.Errorf("version %d: err=%v, want ErrVersion", v, err)
		}
	}
	for _, typ := range []uint8{0, 3, 15} {
		b := bytes.Clone(good)
		b[0] = 0x10 | typ
		if _, _, err := ParseRDHeader(b); !errors.Is(err, ErrBadType) {
			t.Errorf("type %d: err=%v, want ErrBadType", typ, err)
		}
	}
}

func TestSeqArithmetic(t *testing.T) {
	tests := []struct {
		a, b uint32
		less bool
		diff int32
	}{
		{0, 1, true, 1},
		{1, 0, false, -1},
		{5, 5, false, 0},
		{0xffffffff, 0, true, 1}, // wrap
		{0xfffffff0, 0x10, true, 0x20},
		{0x10, 0xfffffff0, false, -0x20},
		{0, 0x7fffffff, true, 0x7fffffff},
		{0, 0x80000000, false, -0x80000000}, // 2^31 apart: unordered
		{0x80000000, 0, false, -0x80000000},
	}
	for _, tt := range tests {
		if got := SeqLess(tt.a, tt.b); got != tt.less {
			t.Errorf("SeqLess(%#x, %#x) = %v, want %v", tt.a, tt.b, got, tt.less)
		}
		if got := SeqLessEq(tt.a, tt.b); got != (tt.less || tt.a == tt.b) {
			t.Errorf("SeqLessEq(%#x, %#x) = %v", tt.a, tt.b, got)
		}
		if got := SeqDiff(tt.a, tt.b); got != tt.diff {
			t.Errorf("SeqDiff(%#x, %#x) = %d, want %d", tt.a, tt.b, got, tt.diff)
		}
	}
}

func TestAcked(t *testing.T) {
	h := goldenRDData // cumack 5, SACK bits 0 and 2: 6 and 8
	for seq, want := range map[uint32]bool{0: true, 3: true, 4: true, 5: false, 6: true, 7: false, 8: true, 9: false, 37: false, 0xffffffff: true} {
		if got := h.Acked(seq); got != want {
			t.Errorf("Acked(%d) = %v, want %v", seq, got, want)
		}
	}
	h.Flags = 0
	if h.Acked(0) {
		t.Error("Acked without FlagAck")
	}
	// SACK across the wrap, highest bit.
	w := RDHeader{Flags: FlagAck, CumAck: 0xfffffff0, SACK: 1<<31 | 1}
	if !w.Acked(0xfffffff1) || !w.Acked(0x10) || w.Acked(0x11) || w.Acked(0xfffffff0) || w.Acked(0x0) || !w.Acked(0xffffffef) {
		t.Error("SACK across wrap")
	}
}

func FuzzParseRDHeader(f *testing.F) {
	f.Add(goldenRDData.Append(nil))
	f.Add(goldenRDAck.Append(nil))
	f.Add([]byte{0x11})
	f.Fuzz(func(t *testing.T, b []byte) {
		h, n, err := ParseRDHeader(b)
		if err != nil {
			return
		}
		if n != RDHeaderLen {
			t.Fatalf("n = %d", n)
		}
		if got := h.Append(nil); !bytes.Equal(got, b[:n]) {
			t.Fatalf("round trip %x != %x", got, b[:n])
		}
	})
}
