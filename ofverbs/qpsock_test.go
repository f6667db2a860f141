package ofverbs_test

import (
	"context"
	"encoding/json"
	"os/exec"
	"testing"
	"time"

	"github.com/iwarpd/iwarpd/ofverbs"
	"github.com/iwarpd/iwarpd/proto"
	"github.com/iwarpd/iwarpd/test/daemontest"
)

// qpSockets returns, per QP address, whether iwarpctl says the QP's socket
// is its client's own (proto.QPInfo.ClientSocket).
func qpSockets(t testing.TB, sock string) map[string]bool {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), scaled(20*time.Second))
	defer cancel()
	out, err := exec.CommandContext(ctx, daemontest.Bins["iwarpctl"], "-socket", sock, "-json", "qps").Output()
	if err != nil {
		t.Fatalf("iwarpctl qps: %v", err)
	}
	var qps []proto.QPInfo
	if err := json.Unmarshal(out, &qps); err != nil {
		t.Fatalf("iwarpctl -json qps: %v: %s", err, out)
	}
	m := map[string]bool{}
	for _, q := range qps {
		m[q.Addr] = q.ClientSocket
	}
	return m
}

// TestDaemonQPSockets: a UD QP of ofverbs has a socket of the client's
// own (ABI 5; docs/security.md "Client-made QP sockets"); with
// WithDaemonQPSockets the daemon's, as before; and the two talk both ways.
func TestDaemonQPSockets(t *testing.T) {
	d := startDaemon(t)
	mine := newEndpoint(t, d.open(t), epOpts{})
	c2, err := ofverbs.Open(ofverbs.WithSocket(d.sock), ofverbs.WithDaemonQPSockets())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c2.Close() })
	theirs := newEndpoint(t, c2, epOpts{})
	got := qpSockets(t, d.sock)
	if !got[mine.qp.Addr().String()] || got[theirs.qp.Addr().String()] {
		t.Fatalf("client_socket by QP address %v: want true for %v (default), false for %v (WithDaemonQPSockets)",
			got, mine.qp.Addr(), theirs.qp.Addr())
	}
	for i, pair := range [][2]*endpoint{{mine, theirs}, {theirs, mine}} {
		from, to := pair[0], pair[1]
		to.postRecvs(t, 0, 1, 256)
		src := from.buf.Bytes()[4096 : 4096+100]
		pattern(src, i)
		if _, err := from.qp.PostSend([]ofverbs.SendWR{{ID: uint64(i), Opcode: ofverbs.WRSend, AH: from.ahTo(t, to), Signaled: true,
			SGL: []ofverbs.SGE{from.mr.SGE(src)}}}); err != nil {
			t.Fatal(err)
		}
		if wc := waitWC(t, from.sendCQ, 1, 10*time.Second)[0]; wc.Err() != nil {
			t.Fatalf("send %d: %v", i, wc.Err())
		}
		if wc := waitWC(t, to.recvCQ, 1, 10*time.Second)[0]; wc.Err() != nil || wc.ByteLen != 100 {
			t.Fatalf("receive %d: %+v", i, wc)
		}
	}
}

// BenchmarkDaemonCreateQP: what a QP's creation costs with a client-made
// socket (reserve-port, socket, bind, create-qp with the descriptor, the
// daemon's checks) and with the daemon's (create-qp alone), UD and RD,
// each created and destroyed b.N times. Binds ports: run it under the
// test lock (docs/security.md "Client-made QP sockets" has the figures).
func BenchmarkDaemonCreateQP(b *testing.B) {
	ports := udBlocks.Next()
	d := daemontest.Start(b, "bench-"+ports, daemontest.Options{Ports: ports})
	for _, mode := range []string{"client", "daemon"} {
		opts := []ofverbs.Option{ofverbs.WithSocket(d.Sock)}
		if mode == "daemon" {
			opts = append(opts, ofverbs.WithDaemonQPSockets())
		}
		c, err := ofverbs.Open(opts...)
		if err != nil {
			b.Fatal(err)
		}
		pd, err := c.AllocPD()
		if err != nil {
			b.Fatal(err)
		}
		cq, err := c.CreateCQ(16, nil)
		if err != nil {
			b.Fatal(err)
		}
		for _, typ := range []ofverbs.QPType{ofverbs.QPTypeUD, ofverbs.QPTypeRD} {
			b.Run(mode+"-"+typ.String(), func(b *testing.B) {
				for range b.N {
					q, err := pd.CreateQP(ofverbs.QPInitAttr{Type: typ, SendCQ: cq, RecvCQ: cq,
						Cap: ofverbs.QPCap{MaxSendWR: 8, MaxRecvWR: 8, MaxSendSGE: 1, MaxRecvSGE: 1}})
					if err != nil {
						b.Fatal(err)
					}
					q.Close()
				}
			})
		}
		c.Close()
	}
}
