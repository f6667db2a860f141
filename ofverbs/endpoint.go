package ofverbs

import (
	"fmt"
	"net/netip"
	"strconv"
	"strings"
)

// Endpoint names a datagram QP for its peers: the UDP address it is bound
// to and its Q_Key (docs/wire-format.md §5.1). A peer needs both to send to
// it, and learns them out of band, as InfiniBand peers exchange QPNs and
// Q_Keys. The daemon gives every datagram QP a random Q_Key unless the
// application chose one (QPInitAttr.QKey), so knowing a QP's address alone
// does not let a stranger reach it.
type Endpoint struct {
	Addr netip.AddrPort
	QKey uint32
}

// String formats e as "ip:port/qkey", the Q_Key in 8 hex digits:
// "10.0.0.7:17001/8b3a5c21", "[2001:db8::1]:17001/8b3a5c21".
func (e Endpoint) String() string { return fmt.Sprintf("%v/%08x", e.Addr, e.QKey) }

// ParseEndpoint parses the output of Endpoint.String.
func ParseEndpoint(s string) (Endpoint, error) {
	i := strings.LastIndexByte(s, '/')
	if i < 0 {
		return Endpoint{}, fmt.Errorf("ofverbs: endpoint %q: want ip:port/qkey (QP.Endpoint().String())", s)
	}
	ap, err := netip.ParseAddrPort(s[:i])
	if err != nil {
		return Endpoint{}, fmt.Errorf("ofverbs: endpoint %q: %w", s, err)
	}
	k, err := strconv.ParseUint(s[i+1:], 16, 32)
	if err != nil || k == 0 {
		return Endpoint{}, fmt.Errorf("ofverbs: endpoint %q: Q_Key %q: want 1 to 8 hex digits, not 0", s, s[i+1:])
	}
	return Endpoint{Addr: ap, QKey: uint32(k)}, nil
}
