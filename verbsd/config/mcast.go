package config

import (
	"fmt"
	"net"
	"net/netip"
)

// McastConfig is the device's UD multicast policy (iwarpd -mcast-* flags).
// The zero value: join groups on the interface holding Config.Addr, send
// with TTL 1, and loop sent datagrams back to local members.
type McastConfig struct {
	// Interface is the name of the interface groups are joined on and
	// datagrams to groups leave by ("": the one holding Config.Addr, or the
	// kernel's choice when Addr is a wildcard).
	Interface string
	// TTL is IP_MULTICAST_TTL of datagrams sent to a group (0: 1).
	TTL int
	// NoLoop clears IP_MULTICAST_LOOP: datagrams a QP sends to a group are
	// not delivered to members on the same host.
	NoLoop bool
}

// Ttl returns the effective TTL.
func (m McastConfig) Ttl() int {
	if m.TTL == 0 {
		return 1
	}
	return m.TTL
}

// validate checks the policy (part of Config.Validate).
func (m McastConfig) validate() error {
	if m.TTL < 0 || m.TTL > 255 {
		return fmt.Errorf("verbsd: multicast TTL %d: want 0..255", m.TTL)
	}
	return nil
}

// McastInterface resolves the interface index and IPv4 address used for
// IP_ADD_MEMBERSHIP and IP_MULTICAST_IF: the named interface, else the one
// holding addr, else (0, unspecified): the kernel's choice by route.
func (m McastConfig) McastInterface(addr netip.Addr) (int, [4]byte, error) {
	if m.Interface != "" {
		ifi, err := net.InterfaceByName(m.Interface)
		if err != nil {
			return 0, [4]byte{}, fmt.Errorf("verbsd: multicast interface %q: %w", m.Interface, err)
		}
		var a [4]byte
		if addrs, err := ifi.Addrs(); err == nil {
			for _, x := range addrs {
				if n, ok := x.(*net.IPNet); ok && n.IP.To4() != nil {
					copy(a[:], n.IP.To4())
					break
				}
			}
		}
		return ifi.Index, a, nil
	}
	if !addr.Is4() || addr.IsUnspecified() {
		return 0, [4]byte{}, nil
	}
	ifs, err := net.Interfaces()
	if err != nil {
		return 0, addr.As4(), nil
	}
	for _, ifi := range ifs {
		addrs, err := ifi.Addrs()
		if err != nil {
			continue
		}
		for _, x := range addrs {
			if n, ok := x.(*net.IPNet); ok {
				if ip, ok := netip.AddrFromSlice(n.IP); ok && ip.Unmap() == addr {
					return ifi.Index, addr.As4(), nil
				}
			}
		}
	}
	return 0, addr.As4(), nil
}
