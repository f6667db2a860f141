package rdmap

import (
	"bytes"
	"encoding/hex"
	"errors"
	"testing"
)

func TestWriteRecordTable(t *testing.T) {
	tests := []struct {
		name string
		wr   WriteRecord
		hex  string
	}{
		{"zero", WriteRecord{}, "000000000000000000000000"},
		// The docs/wire-format.md "ud-write-record" golden's header.
		{"golden", WriteRecord{RecordID: 9, MessageLength: 12, MessageOffset: 6}, "000000090000000c00000006"},
		{"max", WriteRecord{0xffffffff, 0xffffffff, 0xffffffff}, "ffffffffffffffffffffffff"},
		{"byte order", WriteRecord{0x01020304, 0x05060708, 0x090a0b0c}, "0102030405060708090a0b0c"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			want, err := hex.DecodeString(tt.hex)
			if err != nil {
				t.Fatal(err)
			}
			got := tt.wr.Append(nil)
			if !bytes.Equal(got, want) {
				t.Fatalf("Append = %x, want %x", got, want)
			}
			if tt.wr.Len() != len(want) || WriteRecordLen != 12 {
				t.Fatalf("Len = %d, want %d", tt.wr.Len(), len(want))
			}
			// Trailing payload is not consumed.
			wr, n, err := ParseWriteRecord(append(want, 0xaa, 0xbb))
			if err != nil || n != WriteRecordLen || wr != tt.wr {
				t.Fatalf("ParseWriteRecord = %+v, %d, %v; want %+v, 12, nil", wr, n, err, tt.wr)
			}
		})
	}
}

func TestWriteRecordAppendKeepsPrefix(t *testing.T) {
	w := WriteRecord{RecordID: 1, MessageLength: 2, MessageOffset: 3}
	got := w.Append([]byte{0xde, 0xad})
	if !bytes.Equal(got[:2], []byte{0xde, 0xad}) || len(got) != 14 {
		t.Fatalf("Append(prefix) = %x", got)
	}
}

func TestWriteRecordTruncated(t *testing.T) {
	full := (&WriteRecord{RecordID: 7, MessageLength: 100, MessageOffset: 50}).Append(nil)
	for i := 0; i < len(full); i++ {
		_, n, err := ParseWriteRecord(full[:i])
		if !errors.Is(err, ErrWriteRecordTruncated) || n != 0 {
			t.Fatalf("prefix %d: n=%d err=%v, want ErrWriteRecordTruncated", i, n, err)
		}
	}
}

func FuzzParseWriteRecord(f *testing.F) {
	f.Add((&WriteRecord{RecordID: 9, MessageLength: 12, MessageOffset: 6}).Append(nil))
	f.Add([]byte{})
	f.Add(bytes.Repeat([]byte{0xff}, 13))
	f.Fuzz(func(t *testing.T, b []byte) {
		wr, n, err := ParseWriteRecord(b)
		if err != nil {
			if len(b) >= WriteRecordLen {
				t.Fatalf("error on %d bytes: %v", len(b), err)
			}
			return
		}
		if n != WriteRecordLen {
			t.Fatalf("n = %d", n)
		}
		if got := wr.Append(nil); !bytes.Equal(got, b[:n]) {
			t.Fatalf("round trip %x != %x", got, b[:n])
		}
	})
}

// TestWriteRecordImm: the golden header of docs/wire-format.md §8.1
// ("ud-write-record-imm"), round trip, every-prefix truncation, and
// IsWriteRecord.
func TestWriteRecordImm(t *testing.T) {
	w := WriteRecordImm{WriteRecord: WriteRecord{RecordID: 9, MessageLength: 12, MessageOffset: 6}, Imm: MakeImmediateData(0xcafef00d)}
	want, _ := hex.DecodeString("000000090000000c00000006cafef00d00000000")
	got := w.Append([]byte{0xde})
	if !bytes.Equal(got[1:], want) || got[0] != 0xde || w.Len() != len(want) || WriteRecordImmLen != 20 {
		t.Fatalf("Append = %x, want de%x", got, want)
	}
	p, n, err := ParseWriteRecordImm(append(want, 0xaa))
	if err != nil || n != WriteRecordImmLen || p != w || p.Imm.Value() != 0xcafef00d {
		t.Fatalf("ParseWriteRecordImm = %+v, %d, %v", p, n, err)
	}
	for i := range len(want) {
		if _, n, err := ParseWriteRecordImm(want[:i]); !errors.Is(err, ErrWriteRecordTruncated) || n != 0 {
			t.Fatalf("prefix %d: n=%d err=%v", i, n, err)
		}
	}
	for op := Opcode(0); op <= maxOpcode; op++ {
		if op.IsWriteRecord() != (op == 0xc || op == 0xd) {
			t.Errorf("%v: IsWriteRecord = %v", op, op.IsWriteRecord())
		}
	}
}

func FuzzParseWriteRecordImm(f *testing.F) {
	w := WriteRecordImm{WriteRecord: WriteRecord{RecordID: 9, MessageLength: 12, MessageOffset: 6}, Imm: MakeImmediateData(0xcafef00d)}
	f.Add(w.Append(nil))
	f.Add([]byte{})
	f.Add(bytes.Repeat([]byte{0xff}, 21))
	f.Fuzz(func(t *testing.T, b []byte) {
		w, n, err := ParseWriteRecordImm(b)
		if err != nil {
			if len(b) >= WriteRecordImmLen {
				t.Fatalf("error on %d bytes: %v", len(b), err)
			}
			return
		}
		if got := w.Append(nil); n != WriteRecordImmLen || !bytes.Equal(got, b[:n]) {
			t.Fatalf("round trip %x != %x (n %d)", got, b[:n], n)
		}
	})
}
