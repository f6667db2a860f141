package dissect

import (
	"encoding/binary"

	"github.com/iwarpd/iwarpd/internal/crc32c"
	"github.com/iwarpd/iwarpd/llp/dgram"
)

// UDP GSO super-packets. The daemon sends runs of equal-size datagrams to
// one destination with one sendmsg and UDP_SEGMENT (docs/iwarpd.md -gso);
// the kernel cuts the run into datagrams only on the way out, so a capture
// taken on the sending host (loopback, or the sender's side of a veth)
// holds one UDP datagram whose IP and UDP lengths cover the whole run: a
// GSO super-packet. Every segment of it is a whole datagram-iWARP datagram
// with its own CRC32c trailer; all have the segment size but the last,
// which may be shorter (udp(7) UDP_SEGMENT). The segment size is not in
// the packet, so it is inferred: the shortest length S at which the first
// datagram's trailer is the CRC32c of the octets before it and every
// following S octets (the rest, last) end in their own valid trailer.
//
// Only a payload whose whole CRC fails is tried, so a datagram that
// decodes as one never changes; with CRC checking off (-crc=false) there
// is nothing to find the boundaries by, and super-packets are not split
// (docs/iwarpdump.md "GSO super-packets").

// GSOInfo places a datagram in the GSO super-packet it was captured in.
type GSOInfo struct {
	Index   int `json:"index"`    // 1-based position in the super-packet
	Count   int `json:"count"`    // datagrams in the super-packet
	SegSize int `json:"seg_size"` // the inferred segment size (UDP_SEGMENT)
	Len     int `json:"len"`      // the UDP payload of the whole super-packet
}

// minDatagram is the shortest datagram of each framing: UD keys, a tagged
// DDP header and the trailer; RD keys, RD header and trailer (an ACK).
func minDatagram(rd bool) int {
	if rd {
		return dgram.KeyHeaderLen + dgram.RDHeaderLen + crc32c.Size
	}
	return dgram.KeyHeaderLen + dgram.MinSegment + crc32c.Size
}

// trailerOK reports whether b ends in the CRC32c of the octets before it.
func trailerOK(b []byte) bool {
	n := len(b)
	return crc32c.Checksum(b[:n-4]) == binary.LittleEndian.Uint32(b[n-4:])
}

// gsoSplit returns the datagrams of p when p is a GSO super-packet of
// datagram-iWARP datagrams (see above), else nil.
func gsoSplit(p []byte, rd bool) (segSize int, parts [][]byte) {
	least := minDatagram(rd)
	if len(p) < 2*least || trailerOK(p) {
		return 0, nil
	}
	c := crc32c.Checksum(p[:least-4])
	for s := least; s < len(p); s++ {
		if s > least {
			c = crc32c.Update(c, p[s-5:s-4])
		}
		if c != binary.LittleEndian.Uint32(p[s-4:s]) {
			continue
		}
		if parts := splitAt(p, s, least); parts != nil {
			return s, parts
		}
	}
	return 0, nil
}

// splitAt cuts p into datagrams of s octets (the last may be shorter) and
// returns them when every one ends in its valid trailer.
func splitAt(p []byte, s, least int) [][]byte {
	parts := [][]byte{p[:s]}
	for off := s; off < len(p); off += s {
		part := p[off:min(off+s, len(p))]
		if len(part) < least || !trailerOK(part) {
			return nil
		}
		parts = append(parts, part)
	}
	return parts
}
