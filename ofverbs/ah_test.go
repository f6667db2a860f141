package ofverbs

import (
	"net/netip"
	"testing"

	"github.com/iwarpd/iwarpd/internal/shm"
	"github.com/iwarpd/iwarpd/proto"
	"golang.org/x/sys/unix"
)

// requests returns how many control requests the fake daemon received.
func (d *fakeDaemon) requests() int {
	d.mu.Lock()
	defer d.mu.Unlock()
	return len(d.reqs)
}

// TestCreateAHAsksNothing: an address handle is the client's alone (ABI 2):
// creating and closing many costs no control request.
func TestCreateAHAsksNothing(t *testing.T) {
	d := newFakeDaemon(t)
	c := openFake(t, d)
	pd, err := c.AllocPD()
	if err != nil {
		t.Fatal(err)
	}
	before := d.requests()
	for i := range 1000 {
		ah, err := pd.CreateAH(netip.AddrPortFrom(netip.AddrFrom4([4]byte{127, 0, byte(i >> 8), byte(i)}), 4791))
		if err != nil {
			t.Fatal(err)
		}
		if err := ah.Close(); err != nil {
			t.Fatal(err)
		}
	}
	if n := d.requests() - before; n != 0 {
		t.Fatalf("1000 CreateAH/Close made %d control requests, want 0", n)
	}
	// An IPv4-mapped address is the IPv4 address; a multicast group is a
	// destination like any other.
	ah, err := pd.CreateAH(netip.MustParseAddrPort("[::ffff:10.1.2.3]:9"))
	if err != nil || ah.Addr() != netip.MustParseAddrPort("10.1.2.3:9") || ah.av.Family != proto.AVFamilyIPv4 {
		t.Fatalf("IPv4-mapped AH: %v %+v %v", ah, ah.av, err)
	}
	if _, err := pd.CreateAH(netip.MustParseAddrPort("239.255.1.2:4791")); err != nil {
		t.Fatalf("group AH: %v", err)
	}
	// Checked here, as the daemon did before: address, port, family.
	for _, bad := range []netip.AddrPort{{}, netip.MustParseAddrPort("127.0.0.1:0"), netip.MustParseAddrPort("[2001:db8::1]:9")} {
		if _, err := pd.CreateAH(bad); !isErrno(err, unix.EINVAL) {
			t.Errorf("CreateAH(%v): %v, want EINVAL", bad, err)
		}
	}
	if err := pd.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := pd.CreateAH(netip.MustParseAddrPort("127.0.0.1:9")); !isErrno(err, unix.EINVAL) {
		t.Fatalf("CreateAH on a closed PD: %v", err)
	}
}

// TestPostSendChecksAH: a closed AH, or one of another PD than the QP's, is
// refused by PostSend (EINVAL, nothing posted); the AH's address vector is
// what the SQE carries.
func TestPostSendChecksAH(t *testing.T) {
	d := newFakeDaemon(t)
	c := openFake(t, d)
	qp, _, sqRing, _ := fakeQP(t, c, d, QPCap{MaxSendWR: 4, MaxRecvWR: 2, MaxSendSGE: 1, MaxRecvSGE: 1, MaxInline: 16}, nil)
	other, err := c.AllocPD()
	if err != nil {
		t.Fatal(err)
	}
	dst := netip.MustParseAddrPort("127.0.0.1:27002")
	foreign, err := other.CreateAH(dst)
	if err != nil {
		t.Fatal(err)
	}
	closed, err := qp.pd.CreateAH(dst)
	if err != nil {
		t.Fatal(err)
	}
	closed.Close()
	closed.Close() // idempotent
	good, err := qp.pd.CreateAHTo(Endpoint{Addr: dst, QKey: 0x8b3a5c21})
	if err != nil {
		t.Fatal(err)
	}
	keyless, err := qp.pd.CreateAH(dst)
	if err != nil {
		t.Fatal(err)
	}

	wr := func(id uint64, ah *AH) []SendWR {
		return []SendWR{{ID: id, Opcode: WRSend, Inline: true, InlineData: []byte("x"), AH: ah}}
	}
	// A datagram work request must name the destination's Q_Key, through
	// its AH or itself.
	if n, err := qp.PostSend(wr(5, keyless)); n != 0 || !isErrno(err, unix.EINVAL) {
		t.Errorf("AH without a Q_Key: %d, %v; want 0, EINVAL", n, err)
	}
	if n, err := qp.PostSend(wr(1, foreign)); n != 0 || !isErrno(err, unix.EINVAL) {
		t.Errorf("AH of another PD: %d, %v; want 0, EINVAL", n, err)
	}
	if n, err := qp.PostSend(wr(2, closed)); n != 0 || !isErrno(err, unix.EINVAL) {
		t.Errorf("closed AH: %d, %v; want 0, EINVAL", n, err)
	}
	// The good one before a bad one is posted (ibv_post_send's bad_wr).
	if n, err := qp.PostSend(append(wr(3, good), wr(4, foreign)...)); n != 1 || !isErrno(err, unix.EINVAL) {
		t.Errorf("good then foreign: %d, %v; want 1, EINVAL", n, err)
	}
	slot, err := shm.NewConsumer(sqRing).Peek()
	if err != nil || slot == nil {
		t.Fatalf("SQ head: %v %v", slot, err)
	}
	if got := proto.GetSQE(slot); got.WRID != 3 || got.AH != proto.AddressVectorOf(dst) || got.QKey != 0x8b3a5c21 {
		t.Fatalf("posted SQE %+v, want WRID 3 to %v with Q_Key 0x8b3a5c21", got, dst)
	}
	// After the Context closed, the AH is refused (its PD is closed) and
	// closing it is still safe.
	c.Close()
	if err := good.usable(qp.pd); err == nil {
		t.Error("AH usable after Context.Close")
	}
	if err := good.Close(); err != nil {
		t.Fatal(err)
	}
}

func TestEndpointText(t *testing.T) {
	for _, e := range []Endpoint{
		{Addr: netip.MustParseAddrPort("10.0.0.7:17001"), QKey: 0x8b3a5c21},
		{Addr: netip.MustParseAddrPort("[2001:db8::1]:17001"), QKey: 1},
	} {
		got, err := ParseEndpoint(e.String())
		if err != nil || got != e {
			t.Errorf("ParseEndpoint(%q) = %v, %v", e.String(), got, err)
		}
	}
	if s := (Endpoint{Addr: netip.MustParseAddrPort("10.0.0.7:17001"), QKey: 0xab}).String(); s != "10.0.0.7:17001/000000ab" {
		t.Errorf("String = %q", s)
	}
	for _, bad := range []string{"10.0.0.7:17001", "10.0.0.7:17001/", "10.0.0.7:17001/0", "10.0.0.7:17001/1ffffffff", "x/12", "10.0.0.7:17001/zz"} {
		if _, err := ParseEndpoint(bad); err == nil {
			t.Errorf("ParseEndpoint(%q) accepted", bad)
		}
	}
}
