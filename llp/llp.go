package llp

// Transport is what DDP needs to know of the layer that carries its
// segments: the largest DDP segment (header and payload) one lower-layer
// PDU may carry — MULPDU for MPA (RFC 5044 §5.3), the datagram size less the
// profile's framing for UDP.
type Transport interface {
	MaxSegment() int
}

// Fixed is a Transport with a constant maximum segment size.
type Fixed int

// MaxSegment returns int(f).
func (f Fixed) MaxSegment() int { return int(f) }
