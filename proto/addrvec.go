package proto

import (
	"encoding/binary"
	"fmt"
	"net/netip"
)

// AddressVector is the destination of a datagram work request, carried in
// its SQE (octets 36..55): the whole of an address handle (ABI 2). The
// daemon reads it from every datagram SQE and validates it; nothing about
// an address handle is registered with the daemon.
//
//	0  Family u8   AVFamilyIPv4 or AVFamilyIPv6 (0: no destination)
//	1  Flags  u8   reserved, zero
//	2  Port   u16  UDP port, little-endian, not zero
//	4  IP     [16] IPv6; an IPv4 address in its IPv4-mapped form
//	               (::ffff:a.b.c.d), as in a CQE's SrcIP
//
// An IPv4 destination is always carried with AVFamilyIPv4, never as an
// IPv6 AVFamilyIPv6 address that happens to be IPv4-mapped: the daemon
// sends to it from an IPv4 socket, as it built IPv4 sockaddrs for
// IPv4-mapped addresses before (the address is unmapped first).
type AddressVector struct {
	Family uint8
	Flags  uint8
	Port   uint16
	IP     [16]byte
}

// Address vector families.
const (
	AVFamilyIPv4 uint8 = 4
	AVFamilyIPv6 uint8 = 6
)

// AddressVectorLen is the encoded size of an AddressVector; OffSQEAH is
// where it sits in an SQE.
const (
	AddressVectorLen = 20
	OffSQEAH         = 36
)

// AddressVectorOf returns the address vector of a (IPv4-mapped addresses
// are IPv4). An invalid a gives the zero vector, which AddrPort refuses.
func AddressVectorOf(a netip.AddrPort) AddressVector {
	ip := a.Addr().Unmap()
	if !ip.IsValid() {
		return AddressVector{}
	}
	av := AddressVector{Family: AVFamilyIPv6, Port: a.Port(), IP: ip.As16()}
	if ip.Is4() {
		av.Family = AVFamilyIPv4
	}
	return av
}

// AddrPort validates v and returns its destination (an IPv4 address
// unmapped): the family must be known and agree with the address (IPv4
// exactly when IPv4-mapped), the flags zero, the port not zero, an IPv6
// address specified (not ::).
func (v AddressVector) AddrPort() (netip.AddrPort, error) {
	if v.Flags != 0 {
		return netip.AddrPort{}, fmt.Errorf("proto: address vector: unknown flags %#x", v.Flags)
	}
	if v.Port == 0 {
		return netip.AddrPort{}, fmt.Errorf("proto: address vector: port 0")
	}
	ip := netip.AddrFrom16(v.IP)
	switch v.Family {
	case AVFamilyIPv4:
		if !ip.Is4In6() {
			return netip.AddrPort{}, fmt.Errorf("proto: address vector: IPv4 family with non-IPv4-mapped address %v", ip)
		}
		ip = ip.Unmap()
	case AVFamilyIPv6:
		if ip.Is4In6() || ip.IsUnspecified() {
			return netip.AddrPort{}, fmt.Errorf("proto: address vector: IPv6 family with address %v", ip)
		}
	default:
		return netip.AddrPort{}, fmt.Errorf("proto: address vector: unknown family %d", v.Family)
	}
	return netip.AddrPortFrom(ip, v.Port), nil
}

func (v *AddressVector) put(b []byte) {
	_ = b[AddressVectorLen-1]
	b[0], b[1] = v.Family, v.Flags
	binary.LittleEndian.PutUint16(b[2:], v.Port)
	copy(b[4:AddressVectorLen], v.IP[:])
}

func getAddressVector(b []byte) AddressVector {
	_ = b[AddressVectorLen-1]
	return AddressVector{Family: b[0], Flags: b[1], Port: binary.LittleEndian.Uint16(b[2:]), IP: [16]byte(b[4:AddressVectorLen])}
}
