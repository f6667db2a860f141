package ud

import (
	"net/netip"
	"testing"
)

// TestSendBatchRoom: Room counts exactly the datagrams pushDatagram then
// takes one after the other, whatever the batch held before (GSO on and
// off, an open message to another destination or of another size) and
// whichever bound stops it (messages, datagrams, octets).
func TestSendBatchRoom(t *testing.T) {
	d1 := netip.MustParseAddrPort("10.0.0.1:4791")
	d2 := netip.MustParseAddrPort("10.0.0.2:4791")
	for _, gso := range []bool{true, false} {
		for _, pre := range []struct {
			n    int
			dest netip.AddrPort
			size int
		}{{0, d1, 0}, {3, d1, 1400}, {5, d2, 1400}, {2, d1, 100}, {60, d2, 1000}} {
			for _, size := range []int{1, 1400, 30000} {
				for _, want := range []int{1, 7, 300, 2000} {
					b := NewSendBatch()
					b.Reset(gso)
					for i := range pre.n {
						pushDatagram(b, pre.dest, make([]byte, pre.size), DgramRef{0, uint32(i)})
					}
					room := b.Room(d1, 18+size+4, 3, MaxSendMsgs, want)
					took := 0
					for took < want && pushDatagram(b, d1, make([]byte, size), DgramRef{1, uint32(took)}) {
						took++
					}
					if room != took {
						t.Fatalf("gso %v, %d before to %v of %d, %d of %d wanted: Room %d, pushed %d", gso, pre.n, pre.dest, pre.size, size, want, room, took)
					}
				}
			}
		}
	}
}
