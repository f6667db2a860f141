package dgram

import (
	"github.com/iwarpd/iwarpd/internal/crc32c"
	"github.com/iwarpd/iwarpd/llp"
)

// PortRange is an inclusive range of UDP ports.
type PortRange struct {
	First, Last uint16
}

// Contains reports whether p is in r.
func (r PortRange) Contains(p uint16) bool { return r.First <= p && p <= r.Last }

// Len returns the number of ports in r (0 if Last < First).
func (r PortRange) Len() int {
	if r.Last < r.First {
		return 0
	}
	return int(r.Last) - int(r.First) + 1
}

// Default UDP port ranges the daemon binds datagram QPs in. They are
// disjoint, so the framing of a datagram (UD or RD) follows from the socket
// it arrives on and is never guessed. Read-only: configuration copies them.
var (
	DefaultUDPorts = PortRange{First: 17000, Last: 17499}
	DefaultRDPorts = PortRange{First: 17500, Last: 17999}
)

// Datagram sizes (octets of UDP payload).
const (
	// DefaultDatagramSize fits an Ethernet MTU of 1500 without IP
	// fragmentation: 1500 − 20 (IPv4) − 8 (UDP).
	DefaultDatagramSize = 1472
	// MaxDatagramSize is the largest UDP payload over IPv4:
	// 65535 − 20 − 8.
	MaxDatagramSize = 65507
)

// Overhead returns the framing octets the profile adds around a DDP
// segment: the key header and the CRC trailer, and the RD header for RD.
func Overhead(rd bool) int {
	if rd {
		return KeyHeaderLen + RDHeaderLen + crc32c.Size
	}
	return KeyHeaderLen + crc32c.Size
}

// MaxSegment returns the largest DDP segment (DDP header, RDMAP header and
// payload) that one datagram of datagramSize octets carries: datagramSize
// − 8 (keys) − 4 (CRC), − 24 more for RD. It returns 0 if nothing fits.
func MaxSegment(datagramSize int, rd bool) int {
	return max(datagramSize-Overhead(rd), 0)
}

// Framing describes the datagrams of one QP: their size and whether they
// carry the RD header. It is the llp.Transport DDP segments against.
type Framing struct {
	DatagramSize int  // octets of UDP payload; DefaultDatagramSize if 0
	RD           bool // reliable-datagram QP
}

var _ llp.Transport = Framing{}

// MaxSegment returns MaxSegment(f.DatagramSize, f.RD), with a zero
// DatagramSize meaning DefaultDatagramSize.
func (f Framing) MaxSegment() int {
	size := f.DatagramSize
	if size == 0 {
		size = DefaultDatagramSize
	}
	return MaxSegment(size, f.RD)
}
