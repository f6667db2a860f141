package main

import (
	"bytes"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/iwarpd/iwarpd/ofverbs"
)

func TestPatternVerify(t *testing.T) {
	p := newPattern(1000)
	good := bytes.Clone(p.message(7, 300))
	if good[0] != 7 || good[243] != 250 || good[244] != 0 || good[299] != 55 {
		t.Fatalf("pattern of iteration 7: % x ...", good[:8])
	}
	fill := make([]byte, 300)
	fillPattern(fill, 7)
	if !bytes.Equal(fill, good) {
		t.Fatal("fillPattern differs from the pattern buffer")
	}
	if err := p.verify(good, 7, 300); err != nil {
		t.Fatalf("intact message rejected: %v", err)
	}
	if err := p.verify(good, 7+patternPeriod, 300); err != nil {
		t.Errorf("the pattern repeats every %d iterations: %v", patternPeriod, err)
	}

	bad := bytes.Clone(good)
	bad[123] ^= 0x40
	tests := []struct {
		name string
		got  []byte
		iter uint64
		want string
	}{
		{"flipped bit", bad, 7, "byte 123 of 300"},
		{"other iteration", good, 8, "byte 0 of 300"},
		{"short", good[:299], 7, "received 299 bytes, want 300"},
		{"long", append(bytes.Clone(good), 0), 7, "received 301 bytes"},
		{"zeroed", make([]byte, 300), 7, "byte 0 of 300 is 0x00, want 0x07"},
		{"last byte", append(bytes.Clone(good[:299]), good[299]+1), 7, "byte 299"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := p.verify(tt.got, tt.iter, 300)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("verify = %v, want an error containing %q", err, tt.want)
			}
		})
	}
	var r sideResult
	r.check(p, good, 7, 300)
	r.check(p, bad, 7, 300)
	r.check(p, bad, 7, 300)
	if r.verified != 1 || r.mismatches != 2 || !strings.Contains(r.firstError, "byte 123") {
		t.Errorf("sideResult = %+v", r)
	}
}

func TestComputeLat(t *testing.T) {
	rtt := make([]time.Duration, 100)
	for i := range rtt {
		rtt[i] = time.Duration(100-i) * 2 * time.Microsecond // one-way 100..1 µs
	}
	got := computeLat(rtt)
	want := latStats{MinUS: 1, MedianUS: 50, AvgUS: 50.5, P99US: 99, MaxUS: 100}
	if got != want {
		t.Errorf("computeLat = %+v, want %+v", got, want)
	}
	if rtt[0] != 200*time.Microsecond {
		t.Error("computeLat reordered its input")
	}
	if one := computeLat([]time.Duration{10 * time.Microsecond}); one.MinUS != 5 || one.P99US != 5 || one.MaxUS != 5 {
		t.Errorf("one sample: %+v", one)
	}
}

func TestComputeBW(t *testing.T) {
	// 1000 messages of 125000 bytes in 1 s: 1 Gbit/s, 125 MB/s, 0.001 Mpps.
	b := computeBW(125000, 1000, time.Second, 0)
	if b.AvgGbps != 1 || b.PeakGbps != 1 || b.AvgMBps != 125 || b.MsgRateMpps != 0.001 || b.Seconds != 1 {
		t.Errorf("computeBW = %+v", b)
	}
	if b := computeBW(125000, 1000, time.Second, 250e6); b.PeakGbps != 2 {
		t.Errorf("peak = %v, want 2", b.PeakGbps)
	}
}

func TestPeakRate(t *testing.T) {
	t0 := time.Unix(0, 0)
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	marks := []mark{{at(0), 0}, {at(10), 100}, {at(11), 200}, {at(30), 300}, {at(31), 400}}
	// Spans of at least 200 messages: best is 100→300 (200 msgs in 20 ms)
	// or 0→200 (200 in 11 ms): 200*1000 B / 0.011 s.
	if got, want := peakRate(marks, 200, 1000), 200*1000/0.011; got < want*0.999 || got > want*1.001 {
		t.Errorf("peakRate = %v, want %v", got, want)
	}
	if got := peakRate(marks, 1000, 1000); got != 0 {
		t.Errorf("no span long enough: %v", got)
	}
}

func TestAgree(t *testing.T) {
	base := hello{Version: 1, Test: "lat", Op: "send", Transport: "ud", Sizes: []int{64}, Iterations: 10, Window: 64, Addr: "a"}
	other := base
	other.Addr = "b"
	if err := agree(base, other); err != nil {
		t.Errorf("addresses may differ: %v", err)
	}
	other.Test, other.Sizes, other.Iterations = "bw", []int{65536}, 5
	err := agree(base, other)
	for _, want := range []string{"-m: client lat, server bw", "-s/-a sizes: client [64], server [65536]", "-n: client 10, server 5"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("agree = %v, want it to contain %q", err, want)
		}
	}
}

func TestParseConfig(t *testing.T) {
	c, err := parseConfig([]string{"-raw", "udp", "10.0.0.1", "-m", "bw", "-n", "5"}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if c.server != "10.0.0.1" || c.test != "bw" || c.iters != 5 || c.raw != "udp" || c.transportName() != "raw-udp" {
		t.Errorf("flags after the server name: %+v", c)
	}
	if s, err := c.sizes(maxUDPPayload); err != nil || len(s) != 1 || s[0] != 65507 {
		t.Errorf("raw udp bw default size = %v, %v", s, err)
	}
	c.all = true
	if s, _ := c.sizes(1 << 20); len(s) != 21 || s[0] != 1 || s[20] != 1<<20 {
		t.Errorf("-a sizes = %v", s)
	}
	for _, tt := range []struct {
		args []string
		want string
	}{
		{[]string{"-t", "xd"}, "-t \"xd\": want ud, rc or rd"},
		{[]string{"-o", "write"}, "-o write: needs -t rc"},
		{[]string{"-t", "rd", "-o", "write"}, "-o write: needs -t rc"},
		{[]string{"-t", "rc", "-o", "read", "-raw", "tcp"}, "-o read: needs -t rc or -t rd"},
		{[]string{"-o", "read"}, "-o read: needs -t rc or -t rd"},
		{[]string{"-t", "rc", "-o", "write-record"}, "-o write-record: needs -t ud or -t rd"},
		{[]string{"-o", "write-record", "-raw", "udp"}, "-o write-record: needs -t ud or -t rd"},
		{[]string{"-o", "bogus"}, "want send, write, read, write-record, fetchadd, cmpswap, send-fetchadd, write-imm or send-imm"},
		{[]string{"-t", "ud", "-o", "fetchadd"}, "-o fetchadd: needs -t rc or -t rd"},
		{[]string{"-o", "write-imm", "-raw", "udp"}, "-o write-imm: needs -t rc or -t ud or -t rd"},
		{[]string{"-t", "rc", "-o", "write-imm", "-m", "bw"}, "-o write-imm: -m lat only"},
		{[]string{"-t", "rc", "-o", "send-fetchadd", "-m", "bw"}, "-o send-fetchadd: -m lat only"},
		{[]string{"-t", "rd", "-s", "70000000"}, "-s 70000000: larger than the largest raw-tcp message"},
		{[]string{"-t", "rc", "-s", "70000000"}, "-s 70000000: larger than the largest raw-tcp message"},
		{[]string{"-m", "x"}, "-m \"x\""},
		{[]string{"-raw", "sctp"}, "-raw \"sctp\""},
		{[]string{"-raw", "tcp", "-raw-batch"}, "-raw-batch: only with -raw udp"},
		{[]string{"-s", "64", "-a"}, "not together with -a"},
		{[]string{"-n", "0"}, "-n 0"},
		{[]string{"-window", "0"}, "-window 0"},
		{[]string{"a", "b"}, "one server at most"},
	} {
		_, err := parseConfig(tt.args, io.Discard)
		if err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%v: %v, want an error containing %q", tt.args, err, tt.want)
		}
	}
	if _, err := parseConfig([]string{"-s", "70000", "-raw", "udp"}, io.Discard); err == nil {
		t.Error("-s 70000 over raw UDP accepted")
	}
	c, _ = parseConfig([]string{"-s", "70000"}, io.Discard)
	if _, err := c.sizes(65536); err == nil || !strings.Contains(err.Error(), "larger than the largest ud message") {
		t.Errorf("-s above the largest message: %v", err)
	}
}

// TestParseConfigRC: -t rc takes every operation.
func TestParseConfigRC(t *testing.T) {
	for _, op := range []string{"send", "write", "read"} {
		c, err := parseConfig([]string{"-t", "rc", "-o", op, "-m", "bw", "127.0.0.1"}, io.Discard)
		if err != nil || c.qpType != "rc" || c.op != op || c.transportName() != "rc" {
			t.Errorf("-t rc -o %s: %+v, %v", op, c, err)
		}
	}
}

// TestParseConfigDatagram: -t rd takes send, read and write-record; -t ud
// send and write-record.
func TestParseConfigDatagram(t *testing.T) {
	for _, tt := range []struct{ qpType, op string }{
		{"rd", "send"}, {"rd", "read"}, {"rd", "write-record"}, {"ud", "send"}, {"ud", "write-record"},
	} {
		c, err := parseConfig([]string{"-t", tt.qpType, "-o", tt.op, "-m", "lat", "127.0.0.1"}, io.Discard)
		if err != nil || c.qpType != tt.qpType || c.op != tt.op || c.transportName() != tt.qpType {
			t.Errorf("-t %s -o %s: %+v, %v", tt.qpType, tt.op, c, err)
		}
	}
}

// TestRDMARegion checks the RDMA memory each side of each test gets.
func TestRDMARegion(t *testing.T) {
	for _, tt := range []struct {
		op, test         string
		server           bool
		slots, recvSlots int
	}{
		{"write", "lat", false, 2, 0},
		{"write", "lat", true, 2, 0},
		{"write", "bw", true, 64, creditSlots},
		{"write", "bw", false, 0, creditSlots},
		{"read", "lat", false, 2, 0},
		{"read", "lat", true, 0, 0},
		{"read", "bw", false, 64, 0},
		{"read", "bw", true, 0, 0},
		{"send", "bw", true, 0, 0},
		{"write-record", "lat", false, 2, 4},
		{"write-record", "lat", true, 2, 4},
		{"write-record", "bw", true, 64, 64},
		{"write-record", "bw", false, 0, creditSlots},
	} {
		cfg := &config{op: tt.op, test: tt.test, window: 64}
		slots, stride := rdmaRegion(cfg, 1000, tt.server)
		recv, _ := rdmaRecvSlots(cfg, tt.server)
		if slots != tt.slots || stride != 1024 || (tt.op != "send" && recv != tt.recvSlots) {
			t.Errorf("%s %s server=%v: %d slots of %d, %d receive slots; want %d of 1024, %d", tt.op, tt.test, tt.server,
				slots, stride, recv, tt.slots, tt.recvSlots)
		}
	}
	if slots, _ := rdmaRegion(&config{op: "read", test: "bw", window: 4096}, 64, false); slots != rcReadDepth {
		t.Errorf("read bw region of %d slots, want the largest read depth %d", slots, rcReadDepth)
	}
}

// TestCheckRecord: a record completion passes only for a whole message of
// the expected size.
func TestCheckRecord(t *testing.T) {
	whole := ofverbs.AppendRecord(nil, []ofverbs.Range{{Offset: 0, Length: 100}})
	ok := ofverbs.WC{Opcode: ofverbs.WCRecvWriteRecord, ByteLen: 100}
	if err := checkRecord(ok, whole, 100); err != nil {
		t.Errorf("whole message: %v", err)
	}
	trimmed := ok
	trimmed.Flags |= ofverbs.WCFlagRecordTrim
	for _, tt := range []struct {
		name string
		wc   ofverbs.WC
		rec  []byte
		size int
		want string
	}{
		{"other size", ok, whole, 64, "record of a 100-octet message, want 64"},
		{"send", ofverbs.WC{Opcode: ofverbs.WCRecv, ByteLen: 100}, whole, 100, "want a Write-Record"},
		{"trimmed", trimmed, whole, 100, "not placed whole"},
		{"hole", ok, ofverbs.AppendRecord(nil, []ofverbs.Range{{Offset: 0, Length: 40}, {Offset: 60, Length: 40}}), 100, "not placed whole"},
		{"short range", ok, ofverbs.AppendRecord(nil, []ofverbs.Range{{Offset: 0, Length: 99}}), 100, "not placed whole"},
		{"truncated", ok, whole[:8], 100, "truncated"},
	} {
		if err := checkRecord(tt.wc, tt.rec, tt.size); err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%s: %v, want %q", tt.name, err, tt.want)
		}
	}
}

// TestLoadByte reads every octet of an aligned buffer through its word.
func TestLoadByte(t *testing.T) {
	b := make([]byte, 64)
	for i := range b {
		b[i] = byte(200 + i)
	}
	for i := range b {
		if got := loadByte(b, i); got != b[i] {
			t.Fatalf("loadByte(%d) = %d, want %d", i, got, b[i])
		}
	}
}

// TestPeerRange: addresses inside the peer's buffer only.
func TestPeerRange(t *testing.T) {
	tr := &verbsTransport{kind: "rc", op: "write"}
	if _, err := tr.peerRange(0, 1); err == nil || !strings.Contains(err.Error(), "exposed no buffer") {
		t.Errorf("no peer buffer: %v", err)
	}
	tr.setPeerBuffer(&remoteBuffer{Addr: 0x10000, RKey: 7, Len: 256})
	if a, err := tr.peerRange(128, 128); err != nil || a != 0x10080 {
		t.Errorf("peerRange(128, 128) = %#x, %v", a, err)
	}
	if _, err := tr.peerRange(129, 128); err == nil {
		t.Error("a range past the end accepted")
	}
}

func TestWriteTable(t *testing.T) {
	rep := &report{Role: "client", Test: "lat", Op: "send", Transport: "raw-udp", Iterations: 10, PollWindowUS: 50, OK: true,
		Results: []result{{Bytes: 64, Iterations: 10, Verified: 20, Latency: &latStats{1.5, 2.25, 3, 4, 5}}}}
	var b bytes.Buffer
	if err := writeTable(&b, rep); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"Send Latency Test (client)", "raw UDP socket", "t_median[us]", "64", "2.25", "data verified: 20 messages intact"} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("table lacks %q:\n%s", want, b.String())
		}
	}
	rep.Results[0].Mismatches, rep.Results[0].FirstError = 1, "server: iteration 3: byte 0"
	b.Reset()
	writeTable(&b, rep)
	if !strings.Contains(b.String(), "DATA MISMATCH at 64 bytes: 1 messages wrong; first: server: iteration 3") {
		t.Errorf("mismatch not shown:\n%s", b.String())
	}
}

// FuzzPatternVerify: verify accepts exactly the message fillPattern makes,
// whatever the input, and never panics.
func FuzzPatternVerify(f *testing.F) {
	good := make([]byte, 64)
	fillPattern(good, 3)
	f.Add(good, uint64(3), 64)
	f.Add(good, uint64(4), 64)
	f.Add([]byte{}, uint64(0), 0)
	f.Add([]byte{1, 2}, uint64(1<<63), 3)
	p := newPattern(4096)
	f.Fuzz(func(t *testing.T, got []byte, iter uint64, size int) {
		if size < 0 || size > 4096 {
			return
		}
		want := make([]byte, size)
		fillPattern(want, iter)
		err := p.verify(got, iter, size)
		if (err == nil) != bytes.Equal(got, want) {
			t.Fatalf("verify(%x, %d, %d) = %v, but equal = %v", got, iter, size, err, bytes.Equal(got, want))
		}
	})
}
