package ofverbs

import (
	"bytes"
	"errors"
	"reflect"
	"testing"
)

func TestParseRecord(t *testing.T) {
	for _, tc := range []struct {
		name string
		b    []byte
		want []Range
	}{
		{"empty", []byte{0, 0, 0, 0}, nil},
		{"one", []byte{1, 0, 0, 0, 0, 0, 0, 0, 0x10, 0x27, 0, 0}, []Range{{0, 10000}}},
		{"two with slack", []byte{2, 0, 0, 0, 0, 0, 0, 0, 0xb4, 5, 0, 0, 0x68, 0xb, 0, 0, 0x2f, 0, 0, 0, 0xff, 0xff},
			[]Range{{0, 1460}, {2920, 47}}},
	} {
		got, err := ParseRecord(tc.b)
		if err != nil || !reflect.DeepEqual(got, tc.want) {
			t.Errorf("%s: %v, %v; want %v", tc.name, got, err, tc.want)
		}
		if enc := AppendRecord(nil, tc.want); !bytes.Equal(enc, tc.b[:RecordLen(len(tc.want))]) {
			t.Errorf("%s: AppendRecord = % x", tc.name, enc)
		}
	}
}

func TestParseRecordTruncated(t *testing.T) {
	full := AppendRecord(nil, []Range{{0, 5}, {9, 3}, {100, 1}})
	for i := range len(full) {
		if _, err := ParseRecord(full[:i]); !errors.Is(err, ErrRecordTruncated) {
			t.Errorf("prefix %d: err = %v", i, err)
		}
	}
	// A count larger than the buffer never allocates for it.
	if _, err := ParseRecord([]byte{0xff, 0xff, 0xff, 0xff, 0, 0, 0, 0}); !errors.Is(err, ErrRecordTruncated) {
		t.Errorf("huge count: %v", err)
	}
}

func FuzzParseRecord(f *testing.F) {
	f.Add(AppendRecord(nil, nil))
	f.Add(AppendRecord(nil, []Range{{0, 1460}, {2920, 47}}))
	f.Add([]byte{0xff, 0xff, 0xff, 0xff})
	f.Fuzz(func(t *testing.T, b []byte) {
		r, err := ParseRecord(b)
		if err != nil {
			return
		}
		if enc := AppendRecord(nil, r); !bytes.Equal(enc, b[:RecordLen(len(r))]) {
			t.Fatalf("round trip: % x != % x", enc, b[:RecordLen(len(r))])
		}
	})
}
