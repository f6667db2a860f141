package proto

import (
	"bytes"
	"net/netip"
	"testing"
)

func TestAddressVector(t *testing.T) {
	for _, s := range []string{"127.0.0.1:4791", "[::ffff:192.0.2.1]:9", "239.255.1.2:4791", "[2001:db8::1]:17000", "[::1]:1"} {
		in := netip.MustParseAddrPort(s)
		av := AddressVectorOf(in)
		b := make([]byte, AddressVectorLen)
		av.put(b)
		if got := getAddressVector(b); got != av {
			t.Fatalf("%s: round trip %+v, want %+v", s, got, av)
		}
		out, err := av.AddrPort()
		want := netip.AddrPortFrom(in.Addr().Unmap(), in.Port())
		if err != nil || out != want {
			t.Errorf("%s: AddrPort = %v, %v; want %v", s, out, err, want)
		}
		if in.Addr().Unmap().Is4() != (av.Family == AVFamilyIPv4) {
			t.Errorf("%s: family %d", s, av.Family)
		}
	}
	v4 := AddressVectorOf(netip.MustParseAddrPort("10.1.2.3:5"))
	v6 := AddressVectorOf(netip.MustParseAddrPort("[2001:db8::1]:5"))
	bad := map[string]AddressVector{
		"zero":                {},
		"invalid AddrPort":    AddressVectorOf(netip.AddrPort{}),
		"unknown family":      {Family: 9, Port: 5, IP: v4.IP},
		"flags":               {Family: AVFamilyIPv4, Flags: 1, Port: 5, IP: v4.IP},
		"port zero":           {Family: AVFamilyIPv4, IP: v4.IP},
		"IPv4 with IPv6 IP":   {Family: AVFamilyIPv4, Port: 5, IP: v6.IP},
		"IPv6 with v4-mapped": {Family: AVFamilyIPv6, Port: 5, IP: v4.IP},
		"IPv6 unspecified":    {Family: AVFamilyIPv6, Port: 5},
	}
	for name, av := range bad {
		if a, err := av.AddrPort(); err == nil {
			t.Errorf("%s: AddrPort = %v, want an error", name, a)
		}
	}
}

// TestSQEAddressVectorOctets checks that the address vector lands in octets
// 36..55 of an SQE and that the reserved octets stay zero.
func TestSQEAddressVectorOctets(t *testing.T) {
	b := bytes.Repeat([]byte{0xee}, SQEHeaderLen)
	e := SQE{AH: AddressVectorOf(netip.MustParseAddrPort("[2001:db8::9]:258"))}
	e.Put(b)
	if !bytes.Equal(b[16:20], make([]byte, 4)) || !bytes.Equal(b[56:64], make([]byte, 8)) {
		t.Fatalf("reserved octets not cleared: % x", b)
	}
	want := append([]byte{AVFamilyIPv6, 0, 0x02, 0x01}, netip.MustParseAddr("2001:db8::9").AsSlice()...)
	if !bytes.Equal(b[OffSQEAH:OffSQEAH+AddressVectorLen], want) {
		t.Fatalf("address vector octets % x, want % x", b[36:56], want)
	}
	if got := GetSQE(b); got != e {
		t.Fatalf("GetSQE = %+v", got)
	}
}
