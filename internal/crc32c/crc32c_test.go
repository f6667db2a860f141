package crc32c

import (
	"bytes"
	"testing"
)

// Vectors from RFC 3720 §B.4 and the conventional check value.
func TestVectors(t *testing.T) {
	inc := make([]byte, 32)
	dec := make([]byte, 32)
	for i := range inc {
		inc[i] = byte(i)
		dec[i] = byte(31 - i)
	}
	// RFC 3720 §B.4: an iSCSI SCSI Read (10) command PDU.
	read10 := []byte{
		0x01, 0xc0, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
		0x14, 0x00, 0x00, 0x00, 0x00, 0x00, 0x04, 0x00, 0x00, 0x00, 0x00, 0x14, 0x00, 0x00, 0x00, 0x18,
		0x28, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x02, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
	}
	cases := []struct {
		name string
		in   []byte
		want uint32
		wire []byte
	}{
		{"check", []byte("123456789"), 0xE3069283, []byte{0x83, 0x92, 0x06, 0xe3}},
		{"32x00", make([]byte, 32), 0x8A9136AA, []byte{0xaa, 0x36, 0x91, 0x8a}},
		{"32xFF", bytes.Repeat([]byte{0xff}, 32), 0x62A8AB43, []byte{0x43, 0xab, 0xa8, 0x62}},
		{"incrementing", inc, 0x46DD794E, []byte{0x4e, 0x79, 0xdd, 0x46}},
		{"decrementing", dec, 0x113FDB5C, []byte{0x5c, 0xdb, 0x3f, 0x11}},
		{"iscsi-read10", read10, 0xD9963A56, []byte{0x56, 0x3a, 0x96, 0xd9}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if got := Checksum(c.in); got != c.want {
				t.Fatalf("Checksum = %#08x, want %#08x", got, c.want)
			}
			if got := Append(nil, c.want); !bytes.Equal(got, c.wire) {
				t.Fatalf("wire bytes = % x, want % x", got, c.wire)
			}
			if got := Get(c.wire); got != c.want {
				t.Fatalf("Get = %#08x, want %#08x", got, c.want)
			}
			half := len(c.in) / 2
			if got := Update(Checksum(c.in[:half]), c.in[half:]); got != c.want {
				t.Fatalf("Update in two parts = %#08x, want %#08x", got, c.want)
			}
		})
	}
}
