package rd

import (
	"testing"
	"time"

	"github.com/iwarpd/iwarpd/proto"
)

// BenchmarkAcked: the engine's work per datagram acknowledged — llp/rd
// processAck, the Acked actions (send.go action, resolve or
// resolveAcked) and complete — for a 1 MiB Send of 725 datagrams
// acknowledged by cumulative ACKs of 32 datagrams each, per datagram
// (the Acked action of each, as before AckedRuns) and per run
// (AckedRuns). The Send's run is handed to the endpoint outside the
// timer. Reported: ns per datagram acknowledged.
func BenchmarkAcked(b *testing.B) {
	const n, every = 725, 32
	for _, c := range []struct {
		name string
		runs bool
	}{{"per-datagram", false}, {"runs", true}} {
		b.Run(c.name, func(b *testing.B) {
			g := newAckRig(b, c.runs)
			now := runT0
			var cum uint32 = 1 // the next sequence number to acknowledge
			for i := 0; i < b.N; i++ {
				b.StopTimer()
				seq := uint64(i + 1)
				w := g.post(b, seq, proto.WRSend, n, false)
				w.sent = n
				g.send(b, now, makeToken(tokWR, seq, 0), n)
				b.StartTimer()
				for acked := 0; acked < n; {
					k := min(every, n-acked)
					acked += k
					cum += uint32(k)
					h := ackH(cum, 0)
					g.q.Rd.ep.Receive(now, ackPeer, h, true)
					g.pass(now)
				}
				if len(g.q.Rd.wrs) != 0 {
					b.Fatalf("the Send did not complete: %s", g.state())
				}
				now = now.Add(time.Millisecond)
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*n), "ns/datagram")
		})
	}
}
