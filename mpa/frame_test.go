package mpa

import (
	"bytes"
	"encoding/hex"
	"errors"
	"reflect"
	"strings"
	"testing"
)

func unhex(t testing.TB, s string) []byte {
	t.Helper()
	b, err := hex.DecodeString(strings.NewReplacer(" ", "", "\n", "", "|", "").Replace(s))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// goldenRequest is protocol-notes §A.1: Request, Rev 2, C+S, P2P with Write
// RTR offered, IRD = ORD = 16.
const goldenRequest = "4d 50 41 20 49 44 20 52 65 71 20 46 72 61 6d 65 50 02 00 04 80 10 80 10"

func TestParseFrameGolden(t *testing.T) {
	b := unhex(t, goldenRequest)
	f, n, err := ParseFrame(b)
	if err != nil {
		t.Fatal(err)
	}
	if n != 24 {
		t.Fatalf("n = %d, want 24", n)
	}
	want := Frame{CRC: true, Enhanced: true, Revision: 2, PrivateData: []byte{0x80, 0x10, 0x80, 0x10}}
	if !reflect.DeepEqual(f, want) {
		t.Fatalf("got %+v, want %+v", f, want)
	}
	e, ulp, err := ParseEnhanced(f.PrivateData)
	if err != nil {
		t.Fatal(err)
	}
	if wantE := (Enhanced{IRD: 16, ORD: 16, PeerToPeer: true, WriteRTR: true}); e != wantE || ulp != nil {
		t.Fatalf("enhanced %+v ulp %x, want %+v", e, ulp, wantE)
	}
	if got := f.Append(nil); !bytes.Equal(got, b) {
		t.Fatalf("Append = % x, want % x", got, b)
	}
	// The initiator policy of the golden vector produces it byte for byte.
	req := NewInitiator(Policy{Revision: 2, CRC: CRCPreferred, IRD: 16, ORD: 16, PeerToPeer: true, RTRTypes: RTRSetWrite}).Request()
	if got := req.Append(nil); !bytes.Equal(got, b) {
		t.Fatalf("Initiator.Request = % x, want % x", got, b)
	}
}

func TestParseFrameTable(t *testing.T) {
	key := func(k string) string { return hex.EncodeToString([]byte(k)) }
	tests := []struct {
		name    string
		in      string
		want    Frame
		n       int
		wantErr error
	}{
		{"rev1 request no pd", key(KeyRequest) + "40 01 00 00", Frame{CRC: true, Revision: 1}, 20, nil},
		{"reply markers reject pd", key(KeyReply) + "a0 01 00 02 ab cd", Frame{Reply: true, Markers: true, Reject: true, Revision: 1, PrivateData: []byte{0xab, 0xcd}}, 22, nil},
		{"siw gso bit", key(KeyReply) + "58 02 00 04 00 01 00 01", Frame{Reply: true, CRC: true, Enhanced: true, ReservedFlags: 0x08, Revision: 2, PrivateData: []byte{0, 1, 0, 1}}, 24, nil},
		{"trailing bytes not consumed", key(KeyRequest) + "00 01 00 01 ff ee dd", Frame{Revision: 1, PrivateData: []byte{0xff}}, 21, nil},
		{"max pd", key(KeyRequest) + "00 01 02 00" + strings.Repeat("00", 512), Frame{Revision: 1, PrivateData: make([]byte, 512)}, 532, nil},
		{"pd too long", key(KeyRequest) + "00 01 02 01", Frame{}, 0, ErrPrivateDataTooLong},
		{"bad key", key("MPA ID Foo Frame") + "00 01 00 00", Frame{}, 0, ErrBadKey},
		{"short", key(KeyRequest) + "00 01 00", Frame{}, 0, ErrTruncated},
		{"short pd", key(KeyRequest) + "00 01 00 03 01 02", Frame{}, 0, ErrTruncated},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f, n, err := ParseFrame(unhex(t, tt.in))
			if !errors.Is(err, tt.wantErr) || (tt.wantErr == nil) != (err == nil) {
				t.Fatalf("err = %v, want %v", err, tt.wantErr)
			}
			if n != tt.n || !reflect.DeepEqual(f, tt.want) {
				t.Fatalf("got %+v n=%d, want %+v n=%d", f, n, tt.want, tt.n)
			}
		})
	}
}

func TestFrameRoundTrip(t *testing.T) {
	frames := []Frame{
		{},
		{Reply: true, Markers: true, CRC: true, Reject: true, Enhanced: true, ReservedFlags: 0x0f, Revision: 2, PrivateData: []byte("hello")},
		{Revision: 1, PrivateData: bytes.Repeat([]byte{7}, MaxPrivateData)},
		{Reply: true, Revision: 255, ReservedFlags: 0x05},
	}
	for i, f := range frames {
		b := f.Append([]byte{0xee}) // after a prefix
		if len(b) != 1+f.Len() {
			t.Fatalf("%d: len %d, Len() %d", i, len(b)-1, f.Len())
		}
		g, n, err := ParseFrame(b[1:])
		if err != nil || n != f.Len() || !reflect.DeepEqual(g, f) {
			t.Fatalf("%d: round trip %+v n=%d err=%v, want %+v", i, g, n, err, f)
		}
	}
}

func TestParseFrameEveryPrefix(t *testing.T) {
	for _, f := range []Frame{{Revision: 1}, {Reply: true, CRC: true, Enhanced: true, Revision: 2, PrivateData: []byte{0x80, 0x01, 0xc0, 0x01, 'x'}}} {
		b := f.Append(nil)
		for i := range len(b) {
			if _, _, err := ParseFrame(b[:i]); !errors.Is(err, ErrTruncated) {
				t.Fatalf("prefix %d/%d: err = %v, want ErrTruncated", i, len(b), err)
			}
		}
		if _, n, err := ParseFrame(b); err != nil || n != len(b) {
			t.Fatalf("full: n=%d err=%v", n, err)
		}
	}
}

func TestEnhanced(t *testing.T) {
	tests := []struct {
		e    Enhanced
		wire string
	}{
		{Enhanced{IRD: 16, ORD: 16, PeerToPeer: true, WriteRTR: true}, "80 10 80 10"},
		{Enhanced{IRD: 1, ORD: 1, PeerToPeer: true, WriteRTR: true, ReadRTR: true}, "80 01 c0 01"}, // siw P2P capture offer
		{Enhanced{IRD: 1, ORD: 1, PeerToPeer: true, WriteRTR: true}, "80 01 80 01"},                // siw P2P capture reply
		{Enhanced{IRD: 0x3fff, ORD: 0, SendRTR: true}, "7f ff 00 00"},
		{Enhanced{}, "00 00 00 00"},
	}
	for _, tt := range tests {
		want := unhex(t, tt.wire)
		if got := tt.e.Append(nil); !bytes.Equal(got, want) {
			t.Errorf("%+v: Append = % x, want % x", tt.e, got, want)
		}
		e, ulp, err := ParseEnhanced(append(want, 'p', 'd'))
		if err != nil || e != tt.e || string(ulp) != "pd" {
			t.Errorf("% x: parse %+v %q %v", want, e, ulp, err)
		}
	}
	// IRD/ORD beyond 14 bits are masked, not spilled into the flags.
	if got := (Enhanced{IRD: 0xffff, ORD: 0xc001}).Append(nil); !bytes.Equal(got, unhex(t, "3f ff 00 01")) {
		t.Errorf("masking: % x", got)
	}
	for i := range EnhancedLen {
		if _, _, err := ParseEnhanced(make([]byte, i)); !errors.Is(err, ErrTruncated) {
			t.Errorf("prefix %d: %v", i, err)
		}
	}
}

func FuzzParseFrame(f *testing.F) {
	f.Add(unhex(f, goldenRequest))
	f.Add((&Frame{Reply: true, Markers: true, Reject: true, Revision: 1, PrivateData: []byte("no")}).Append(nil))
	f.Add((&Frame{Revision: 2, Enhanced: true, PrivateData: []byte{0x80, 1, 0xc0, 1}}).Append(nil))
	f.Add([]byte(KeyReply + "\x00\x01\x02\x01"))
	f.Fuzz(func(t *testing.T, b []byte) {
		fr, n, err := ParseFrame(b)
		if err != nil {
			return
		}
		if n != fr.Len() || n > len(b) || len(fr.PrivateData) > MaxPrivateData {
			t.Fatalf("n=%d Len=%d len(b)=%d pd=%d", n, fr.Len(), len(b), len(fr.PrivateData))
		}
		if got := fr.Append(nil); !bytes.Equal(got, b[:n]) {
			t.Fatalf("re-encode % x, want % x", got, b[:n])
		}
		if fr.Enhanced {
			e, ulp, err := ParseEnhanced(fr.PrivateData)
			if err == nil && !bytes.Equal(append(e.Append(nil), ulp...), fr.PrivateData) {
				t.Fatalf("enhanced round trip")
			}
		}
	})
}
