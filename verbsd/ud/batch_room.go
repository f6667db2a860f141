package ud

import "net/netip"

// Room returns how many datagrams in a row, at most want, of dlen octets
// and at most nio iovecs each, all to dest, the batch can take: each one
// Fits after the ones before it were pushed. A shorter last datagram
// fits wherever a full one does. The batch is not changed.
func (b *SendBatch) Room(dest netip.AddrPort, dlen, nio, maxMsgs, want int) int {
	s := *b // the counters of a copy move; nothing is written
	k := 0
	for k < want && s.Fits(dest, dlen, nio, maxMsgs) {
		if !s.joins(dest, dlen, nio) {
			s.nmsg++
			s.open, s.dest, s.segSize, s.count, s.mbytes, s.iov0, s.short = true, dest, dlen, 0, 0, s.niov, false
		}
		s.niov += nio
		s.ndg++
		s.count++
		s.mbytes += dlen
		s.bytes += dlen
		k++
	}
	return k
}
