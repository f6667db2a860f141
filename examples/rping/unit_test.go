package main

import (
	"bytes"
	"encoding/hex"
	"errors"
	"io"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/iwarpd/iwarpd/proto"
)

func TestRDMAInfo(t *testing.T) {
	tests := []struct {
		name string
		m    rdmaInfo
		hex  string
	}{
		{"zero (the server's go-ahead)", rdmaInfo{}, "00000000000000000000000000000000"},
		{"typical", rdmaInfo{Buf: 0x7fb3c74ff0c0, RKey: 0x883, Size: 64}, "00007fb3c74ff0c0" + "00000883" + "00000040"},
		{"all ones", rdmaInfo{Buf: ^uint64(0), RKey: ^uint32(0), Size: ^uint32(0)}, strings.Repeat("ff", 16)},
		{"byte order", rdmaInfo{Buf: 0x0102030405060708, RKey: 0x090a0b0c, Size: 0x0d0e0f10}, "0102030405060708090a0b0c0d0e0f10"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			want, _ := hex.DecodeString(tc.hex)
			got := tc.m.Append([]byte{0xee})
			if !bytes.Equal(got[1:], want) || got[0] != 0xee {
				t.Fatalf("Append = %x, want ee%x", got, want)
			}
			if tc.m.Len() != len(want) {
				t.Fatalf("Len = %d, want %d", tc.m.Len(), len(want))
			}
			m, n, err := parseRDMAInfo(want)
			if err != nil || n != rdmaInfoLen || m != tc.m {
				t.Fatalf("parse = %+v, %d, %v; want %+v", m, n, err, tc.m)
			}
		})
	}
}

func TestRDMAInfoLength(t *testing.T) {
	full := (&rdmaInfo{Buf: 1, RKey: 2, Size: 3}).Append(nil)
	for i := range len(full) {
		if _, _, err := parseRDMAInfo(full[:i]); !errors.Is(err, errInfoLen) {
			t.Errorf("prefix of %d octets: err = %v, want errInfoLen", i, err)
		}
	}
	// rping checks byte_len == sizeof(struct rping_rdma_info): longer is bogus too.
	if _, _, err := parseRDMAInfo(append(full, 0)); !errors.Is(err, errInfoLen) {
		t.Errorf("17 octets: err = %v, want errInfoLen", err)
	}
}

func FuzzParseRDMAInfo(f *testing.F) {
	f.Add((&rdmaInfo{Buf: 0x7fb3c74ff0c0, RKey: 0x883, Size: 64}).Append(nil))
	f.Add(make([]byte, 16))
	f.Add([]byte{1, 2, 3})
	f.Fuzz(func(t *testing.T, b []byte) {
		m, n, err := parseRDMAInfo(b)
		if err != nil {
			return
		}
		if n != 16 || !bytes.Equal(m.Append(nil), b) {
			t.Fatalf("%x: parsed %+v (%d) re-encodes as %x", b, m, n, m.Append(nil))
		}
	})
}

// The classic rping output: the first ping of 64 octets.
const ping0 = "rdma-ping-0: ABCDEFGHIJKLMNOPQRSTUVWXYZ[\\]^_`abcdefghijklmnopqr"

func TestFillPing(t *testing.T) {
	buf := bytes.Repeat([]byte{0xff}, 64)
	next := fillPing(buf, 0, 'A')
	if got := string(cString(buf)); got != ping0 {
		t.Fatalf("ping 0 = %q, want %q", got, ping0)
	}
	if buf[63] != 0 || len(cString(buf)) != 63 || next != 'B' {
		t.Fatalf("last octet %#x, strlen %d, next %q", buf[63], len(cString(buf)), next)
	}
	// The start character wraps from 'z' to 'A', and so do the characters.
	buf = make([]byte, 26)
	if next := fillPing(buf, 7, 'y'); next != 'z' {
		t.Fatalf("next after 'y' = %q", next)
	}
	if got, want := string(buf), "rdma-ping-7: yzABCDEFGHIJ\x00"; got != want {
		t.Fatalf("ping 7 = %q, want %q", got, want)
	}
	if next := fillPing(buf, 8, 'z'); next != 'A' {
		t.Fatalf("next after 'z' = %q, want 'A'", next)
	}
	// The widest ping number still fits the smallest size.
	buf = make([]byte, minSize)
	fillPing(buf, 2147483647, 'A')
	if got, want := string(buf), "rdma-ping-2147483647: ABC\x00"; got != want {
		t.Fatalf("ping INT_MAX = %q, want %q", got, want)
	}
}

// expectedPings is what the client prints with -v for count pings of size.
func expectedPings(count, size int) []string {
	buf := make([]byte, size)
	start := byte(patternFirst)
	var lines []string
	for i := range count {
		start = fillPing(buf, i, start)
		lines = append(lines, "ping data: "+string(cString(buf)))
	}
	return lines
}

func TestExpectedPingsCycle(t *testing.T) {
	lines := expectedPings(60, 64)
	if lines[0] != "ping data: "+ping0 {
		t.Fatalf("line 0 = %q", lines[0])
	}
	// 58 characters in the cycle: ping 58 starts with 'A' again.
	if !strings.HasPrefix(lines[58], "ping data: rdma-ping-58: ABC") || !strings.HasPrefix(lines[57], "ping data: rdma-ping-57: zAB") {
		t.Fatalf("lines 57, 58 = %q, %q", lines[57], lines[58])
	}
}

func TestExpandArgs(t *testing.T) {
	tests := []struct{ in, want []string }{
		{[]string{"-vV", "-c"}, []string{"-v", "-V", "-c"}},
		{[]string{"-svd"}, []string{"-s", "-v", "-d"}},
		{[]string{"-socket", "/x", "-crc", "off", "-p2p"}, []string{"-socket", "/x", "-crc", "off", "-p2p"}},
		{[]string{"-C", "20", "-S", "64"}, []string{"-C", "20", "-S", "64"}},
		{[]string{"-cv=true"}, []string{"-cv=true"}},
		{[]string{"--", "-vV"}, []string{"--", "-vV"}},
	}
	for _, tc := range tests {
		if got := expandArgs(tc.in); !slices.Equal(got, tc.want) {
			t.Errorf("expandArgs(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
}

func TestParseFlags(t *testing.T) {
	cfg, err := parseFlags([]string{"-cvV", "-a", "10.0.0.1", "-C", "20", "-S", "4096", "-socket", "/s",
		"-mpa-rev", "1", "-crc", "required", "-p2p", "-rtr", "write,read", "-markers=false", "-ird", "1", "-ord", "2", "-timeout", "3s"}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	want := config{addr: "10.0.0.1", port: defaultPort, count: 20, size: 4096, verbose: true, validate: true, socket: "/s",
		timeout: 3 * time.Second, ird: 1, ord: 2,
		mpa: proto.MPAOptions{Revision: 1, CRC: proto.MPACRCRequired, PeerToPeer: proto.ToggleOn, Markers: proto.ToggleOff,
			RTR: proto.RTRWrite | proto.RTRRead}}
	if cfg != want {
		t.Fatalf("config\n got %+v\nwant %+v", cfg, want)
	}
	cfg, err = parseFlags([]string{"-s"}, io.Discard)
	if err != nil || !cfg.server || cfg.port != 7174 || cfg.size != 64 || cfg.count != 0 || cfg.mpa != (proto.MPAOptions{}) {
		t.Fatalf("server defaults: %+v, %v", cfg, err)
	}
	bad := [][]string{
		{},                            // neither side
		{"-s", "-c", "-a", "x"},       // both
		{"-c"},                        // no address
		{"-s", "-S", "25"},            // below RPING_MIN_BUFSIZE
		{"-s", "-S", "65536"},         // above RPING_BUFSIZE - 1
		{"-c", "-a", "x", "-C", "-1"}, // negative count
		{"-c", "-a", "x", "-p", "0"},
		{"-s", "-mpa-rev", "3"},
		{"-s", "-crc", "maybe"},
		{"-s", "-rtr", "write,jump"},
		{"-s", "-ird", "129"},
		{"-s", "extra"},
		{"-s", "-q"}, // rping's self-created QP mode: not offered
	}
	for _, args := range bad {
		var ue *usageError
		if _, err := parseFlags(args, io.Discard); !errors.As(err, &ue) {
			t.Errorf("parseFlags(%q) = %v, want a usage error", args, err)
		}
	}
	if code := run([]string{"-s", "-S", "1"}, io.Discard, io.Discard); code != exitUsage {
		t.Errorf("run with a bad size = %d, want %d", code, exitUsage)
	}
}

func TestCString(t *testing.T) {
	if got := string(cString([]byte("ab\x00cd"))); got != "ab" {
		t.Errorf("cString = %q", got)
	}
	if got := string(cString([]byte("abc"))); got != "abc" {
		t.Errorf("cString without NUL = %q", got)
	}
}
