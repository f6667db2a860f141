package proto

import (
	"bytes"
	"encoding/hex"
	"errors"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

func mustHex(t *testing.T, s string) []byte {
	t.Helper()
	b, err := hex.DecodeString(strings.ReplaceAll(s, " ", ""))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestHeaderGolden(t *testing.T) {
	h := Header{Version: ABIVersion, Op: OpCreateQP | OpReply, Seq: 0x01020304, Status: unix.ENOMEM}
	got := h.Append(nil)
	want := mustHex(t, "49575250 0500 0c80 04030201 0c000000")
	if !bytes.Equal(got, want) {
		t.Fatalf("header = % x\nwant     % x", got, want)
	}
	back, body, err := ParseHeader(append(got, '{', '}'))
	if err != nil || back != h || string(body) != "{}" {
		t.Fatalf("ParseHeader = %+v %q %v", back, body, err)
	}
	for n := range HeaderLen {
		if _, _, err := ParseHeader(got[:n]); !errors.Is(err, ErrShortMessage) {
			t.Fatalf("prefix %d: err = %v", n, err)
		}
	}
	bad := bytes.Clone(got)
	bad[0] ^= 1
	if _, _, err := ParseHeader(bad); !errors.Is(err, ErrBadMagic) {
		t.Fatalf("bad magic: %v", err)
	}
	if s := (OpCreateQP | OpReply).String(); s != "create-qp reply" {
		t.Fatalf("op name %q", s)
	}
}

func TestQueueEntryGolden(t *testing.T) {
	sqe := SQE{WRID: 0x1122334455667788, Opcode: WRRDMAWrite, Flags: SendSignaled | SendFence, NumSGE: 2,
		InlineLen: 0, RKey: 0xa0b0c0d0, RemoteAddr: 0x1000, InvStag: 0,
		AH: AddressVectorOf(netip.MustParseAddrPort("[::ffff:10.0.0.7]:17001")), QKey: 0x8b3a5c21}
	b := make([]byte, SQEHeaderLen)
	sqe.Put(b)
	want := mustHex(t, "8877665544332211 02 09 0200 00000000 00000000 d0c0b0a0 0010000000000000 00000000"+
		"04 00 6942 00000000000000000000ffff0a000007"+"215c3a8b"+strings.Repeat("00", 4))
	if !bytes.Equal(b, want) {
		t.Fatalf("SQE = % x\nwant  % x", b, want)
	}
	if got := GetSQE(b); got != sqe {
		t.Fatalf("GetSQE = %+v", got)
	}

	sge := SGE{Addr: 0x7f0000001000, Length: 4096, LKey: 0x101}
	sb := make([]byte, SGELen)
	sge.Put(sb)
	if !bytes.Equal(sb, mustHex(t, "0010000000 7f0000 00100000 01010000")) {
		t.Fatalf("SGE = % x", sb)
	}
	if GetSGE(sb) != sge {
		t.Fatal("SGE round trip")
	}

	cqe := CQE{WRID: 9, Status: WCRemAccessErr, Opcode: WCRecv, Flags: WCFlagSrcValid | WCFlagTermValid,
		ByteLen: 64, QPN: 3, Src: netip.MustParseAddrPort("127.0.0.1:17001"), Term: 0x010101, TO: 0x20}
	cb := make([]byte, CQESize)
	cqe.Put(cb)
	want = mustHex(t, "0900000000000000 0a 80 0c 00 40000000 03000000 00000000"+
		"00000000000000000000ffff7f000001 6942 0000 01010100 2000000000000000 0000000000000000")
	if !bytes.Equal(cb, want) {
		t.Fatalf("CQE = % x\nwant  % x", cb, want)
	}
	var back CQE
	GetCQE(cb, &back)
	if back != cqe {
		t.Fatalf("GetCQE = %+v, want %+v", back, cqe)
	}
	if n := testing.AllocsPerRun(100, func() { GetCQE(cb, &back) }); n != 0 {
		t.Fatalf("GetCQE allocates %v times", n)
	}
}

func TestSizesAndStrides(t *testing.T) {
	if SQEStride(1, 0) != 128 || SQEStride(4, 0) != 128 || SQEStride(6, 0) != 192 || SQEStride(60, 0) != 1024 {
		t.Fatalf("SQEStride: %d %d %d %d", SQEStride(1, 0), SQEStride(4, 0), SQEStride(6, 0), SQEStride(60, 0))
	}
	if SQEStride(1, 200) != 320 {
		t.Fatalf("SQEStride with inline = %d", SQEStride(1, 200))
	}
	if RQEStride(1) != 32 || RQEStride(0) != 32 || RQEStride(4) != 80 {
		t.Fatal("RQEStride")
	}
	if RingBytes(1, 64) != PageSize || RingBytes(64, 64) != 2*PageSize {
		t.Fatalf("RingBytes = %d %d", RingBytes(1, 64), RingBytes(64, 64))
	}
	for _, off := range []int{OffRingProducer, OffRingConsumer, OffRingArm} {
		if off%64 != 0 {
			t.Fatalf("ring index at %d not cache-line aligned", off)
		}
	}
	if !ValidDepth(1) || !ValidDepth(1024) || ValidDepth(0) || ValidDepth(3) || ValidDepth(MaxDepth*2) {
		t.Fatal("ValidDepth")
	}
}

func TestRingHeaderChecks(t *testing.T) {
	b := make([]byte, RingBytes(8, 64))
	InitRingHeader(b, RingCQ, 8, 64)
	if err := CheckRingHeader(b, RingCQ, 8, 64); err != nil {
		t.Fatal(err)
	}
	cases := map[string]func() error{
		"kind":   func() error { return CheckRingHeader(b, RingSQ, 8, 64) },
		"depth":  func() error { return CheckRingHeader(b, RingCQ, 16, 64) },
		"stride": func() error { return CheckRingHeader(b, RingCQ, 8, 128) },
		"short":  func() error { return CheckRingHeader(b[:100], RingCQ, 8, 64) },
	}
	for name, f := range cases {
		if f() == nil {
			t.Errorf("%s mismatch accepted", name)
		}
	}
	v := bytes.Clone(b)
	v[OffRingVersion] = 99
	var ve *VersionError
	if err := CheckRingHeader(v, RingCQ, 8, 64); !errors.As(err, &ve) {
		t.Fatalf("version mismatch: %v", err)
	}
}

func TestUnmarshalRejectsUnknownAndTrailing(t *testing.T) {
	var r CreateQPRequest
	if err := Unmarshal([]byte(`{"pd":1,"type":2,"bogus":1}`), &r); err == nil {
		t.Fatal("unknown field accepted")
	}
	if err := Unmarshal([]byte(`{"pd":1} {"pd":2}`), &r); err == nil {
		t.Fatal("trailing data accepted")
	}
	if err := Unmarshal([]byte(`{"pd":1,"type":2}`), &r); err != nil || r.PD != 1 || r.Type != QPTypeUD {
		t.Fatalf("valid body: %+v %v", r, err)
	}
}

func TestConnPassesMessagesAndDescriptors(t *testing.T) {
	path := filepath.Join(t.TempDir(), "s")
	l, err := net.ListenUnix("unixpacket", &net.UnixAddr{Name: path, Net: "unixpacket"})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	client, err := Dial(path)
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close()
	sc, err := l.AcceptUnix()
	if err != nil {
		t.Fatal(err)
	}
	server := NewConn(sc)
	defer server.Close()

	f, err := os.CreateTemp(t.TempDir(), "fd")
	if err != nil {
		t.Fatal(err)
	}
	f.WriteString("shared")
	defer f.Close()
	if err := client.Send(Header{Version: ABIVersion, Op: OpRegMR, Seq: 5}, RegMRRequest{PD: 1, Length: 6, Access: AccessLocalWrite}, int(f.Fd())); err != nil {
		t.Fatal(err)
	}
	h, body, fds, err := server.Receive()
	if err != nil {
		t.Fatal(err)
	}
	if h.Op != OpRegMR || h.Seq != 5 || len(fds) != 1 {
		t.Fatalf("got %+v fds=%v", h, fds)
	}
	var req RegMRRequest
	if err := Unmarshal(body, &req); err != nil || req.Length != 6 {
		t.Fatalf("body %+v %v", req, err)
	}
	got := make([]byte, 6)
	if _, err := unix.Pread(fds[0], got, 0); err != nil || string(got) != "shared" {
		t.Fatalf("passed descriptor reads %q %v", got, err)
	}
	unix.Close(fds[0])

	client.Close()
	if _, _, _, err := server.Receive(); err == nil {
		t.Fatal("receive after peer close succeeded")
	}
}

func FuzzParseHeader(f *testing.F) {
	f.Add(Header{Version: ABIVersion, Op: OpHello, Seq: 1}.Append(nil))
	f.Add(append(Header{Version: ABIVersion, Op: OpCreateQP}.Append(nil), `{"pd":1}`...))
	f.Fuzz(func(t *testing.T, b []byte) {
		h, body, err := ParseHeader(b)
		if err != nil {
			return
		}
		if !bytes.Equal(h.Append(nil), b[:HeaderLen]) || len(body) != len(b)-HeaderLen {
			t.Fatalf("round trip mismatch for % x", b)
		}
		var req CreateQPRequest
		_ = Unmarshal(body, &req) // must not panic
	})
}
