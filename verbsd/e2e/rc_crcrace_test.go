package e2e

import (
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"
	"unsafe"

	"github.com/iwarpd/iwarpd/proto"
)

// TestRCReadOfChangingMemory: RDMA Reads, and RDMA Writes, of
// registered memory that its owner changes at the same time (CPU atomics
// on a counter the peer polls with Reads, as t_fi_atomic's clients do)
// must complete: the data is whatever the memory held (RFC 5040 §7.4 says
// nothing of a source changing during the transfer), but the MPA CRC
// (RFC 5044 §4.4) must cover the octets that went on the wire. Before the
// fix the CRC was computed over the memory and writev copied it again
// later, so a change in between sent an FPDU with a wrong CRC, and the
// reading side ended the connection with a Terminate (MPA CRC error):
// "verbs status 5" (flush) in t_fi_atomic's fi_read loop.
func TestRCReadOfChangingMemory(t *testing.T) {
	const (
		n      = 64 << 10 // several FPDUs and a whole writev batch
		rounds = 200
	)
	for _, tc := range []struct {
		name    string
		markers bool
		mss     int
	}{
		{"crc", false, 0},
		{"crc-markers-mss1460", true, 1460},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a, b := rcPairOf(t, 4*n, true, tc.markers, tc.mss)
			// a's owner adds to every word of a.mr.Buf[:n] until the test
			// ends (bounded by stop and by rcWait).
			stop := make(chan struct{})
			var wg sync.WaitGroup
			var passes atomic.Int64
			wg.Add(1)
			go func() {
				defer wg.Done()
				deadline := time.Now().Add(rcWait)
				for time.Now().Before(deadline) {
					select {
					case <-stop:
						return
					default:
					}
					for i := 0; i < n; i += 8 {
						(*atomic.Uint64)(unsafe.Pointer(&a.mr.Buf[i])).Add(1)
					}
					passes.Add(1)
					runtime.Gosched()
				}
			}()
			defer func() {
				close(stop)
				wg.Wait()
			}()
			for i := 1; i <= rounds; i++ {
				// b reads a's changing words; a writes them to b.
				b.postSend(proto.SQE{WRID: uint64(i), Opcode: proto.WRRDMARead, Flags: proto.SendSignaled,
					RKey: a.mr.RKey, RemoteAddr: a.mr.Addr(0)}, []proto.SGE{b.mr.SGE(0, n)}, nil)
				a.postSend(proto.SQE{WRID: uint64(i), Opcode: proto.WRRDMAWrite, Flags: proto.SendSignaled,
					RKey: b.mr.RKey, RemoteAddr: b.mr.Addr(2 * n)}, []proto.SGE{a.mr.SGE(0, n)}, nil)
				for _, x := range []struct {
					who string
					e   *rcEnd
				}{{"read", b}, {"write", a}} {
					c := x.e.waitCQEs(x.e.scq, 1, x.who)[0]
					if c.Status != proto.WCSuccess || c.WRID != uint64(i) {
						r, term := x.e.closeReasons()
						t.Fatalf("round %d: %s of changing memory completed %v (WRID %d); connection ends %v %v",
							i, x.who, c.Status, c.WRID, r, term)
					}
				}
			}
			if passes.Load() == 0 {
				t.Log("the owner's goroutine never finished a pass over the buffer (no CPU): nothing changed during the transfers")
			}
			if r, _ := a.closeReasons(); len(r) > 0 {
				t.Fatalf("a's connection ended: %v", r)
			}
			if r, _ := b.closeReasons(); len(r) > 0 {
				t.Fatalf("b's connection ended: %v", r)
			}
		})
	}
}
