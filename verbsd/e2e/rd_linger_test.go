package e2e

import (
	"math/rand/v2"
	"net/netip"
	"sync"
	"testing"
	"time"

	"github.com/iwarpd/iwarpd/proto"
	"github.com/iwarpd/iwarpd/verbsd"
	"github.com/iwarpd/iwarpd/verbsd/config"
	"github.com/iwarpd/iwarpd/verbsd/ud"
	"github.com/iwarpd/iwarpd/verbsd/verbsdtest"
	"golang.org/x/sys/unix"
)

// receiverLoss drops, with probability 1/2, every datagram the engine
// sends from a socket other than keep's (the sender's): here all the
// receivers' ACKs and Challenges, their lingering ports' replies
// included. The sender's own datagrams all go through.
type receiverLoss struct {
	mu      sync.Mutex
	rng     *rand.Rand
	keep    int
	dropped int
}

func (l *receiverLoss) install(srv *verbsd.Server) {
	srv.Device().Engs[0].Do(func() error {
		ud.EngOf(srv.Device().Engs[0]).Sendmmsg = func(fd int, msgs []unix.Mmsghdr) (int, error) {
			if fd == l.keep {
				return ud.SysSendmmsg(fd, msgs)
			}
			l.mu.Lock()
			defer l.mu.Unlock()
			for i := range msgs {
				if l.rng.IntN(2) == 0 {
					l.dropped++
					continue
				}
				ud.SysSendmmsg(fd, msgs[i:i+1])
			}
			return len(msgs), nil
		}
		return nil
	})
}

// qpFD returns the socket of the QP numbered qpn.
func qpFD(t *testing.T, srv *verbsd.Server, qpn uint32) int {
	t.Helper()
	fd := -1
	srv.Device().Engs[0].Do(func() error {
		for _, q := range srv.Device().Engs[0].QPs {
			if q.QPN == qpn {
				fd = q.FD
			}
		}
		return nil
	})
	if fd < 0 {
		t.Fatalf("QP %d has no socket", qpn)
	}
	return fd
}

// daemonCounters returns the daemon's counters (Inspect, as iwarpctl
// shows them).
func daemonCounters(t *testing.T, path string) map[string]int64 {
	t.Helper()
	return inspect(t, path).Counters
}

// TestRDLingerLastMessage (docs/rd.md "Destroying a QP"): a receiver
// destroys its QP as soon as the last message is in — its ACK still owed
// (a 1 h ACK delay) — while half of what the receiver side sends is lost.
// The ACK the destroyed QP sends once is lost half the time; the port's
// linger acknowledges the sender's retransmissions, so the delivered
// message completes successfully every time. Without the linger
// (-rd-linger negative) about half the iterations completed a delivered
// message with WCRetryExcErr. Then every linger ends: rd_lingering back
// to 0.
func TestRDLingerLastMessage(t *testing.T) {
	const iterations = 20
	srv, path := startRD(t, func(c *config.Config) {
		c.GSO = false
		c.RD.Link.AckDelay = time.Hour
		// 30 retransmissions, none later than 50 ms after the one before:
		// the sender gives up after about 1.5 s, well inside the 4 s
		// linger. With half the ACKs lost one message fails with
		// probability 2^-31.
		c.RD.Link.MaxRTO, c.RD.Link.MaxRetries = 50*time.Millisecond, 30
		c.RD.Linger = 4 * time.Second
	})
	a := newRDNode(t, path, 1<<16, 0)
	loss := &receiverLoss{rng: rand.New(rand.NewPCG(7, 11)), keep: qpFD(t, srv, a.qp.QPN)}
	loss.install(srv)
	b := newRDNode(t, path, 1<<16, 0)
	caps := proto.QPCaps{MaxSendWR: 16, MaxRecvWR: 16, MaxSendSGE: 1, MaxRecvSGE: 1}
	for i := range iterations {
		if i > 0 { // a new receiver QP, on a new port, for each message
			qp, err := b.c.CreateQP(b.pd, b.scq, b.rcq, caps, verbsdtest.QPOptions{Type: proto.QPTypeRD})
			if err != nil {
				t.Fatal(err)
			}
			if err := qp.ToRTS(); err != nil {
				t.Fatal(err)
			}
			b.qp = qp
		}
		ah := a.ah(t, b)
		b.recv(t, uint64(i), 0, 1000)
		a.post(t, proto.SQE{WRID: uint64(i), Opcode: proto.WRSend, Flags: proto.SendSignaled, AH: ah}, []proto.SGE{a.mr.SGE(0, 1000)})
		if rc := waitN(t, b.rcq, 1, "last receive")[0]; rc.Status != proto.WCSuccess || rc.WRID != uint64(i) {
			t.Fatalf("iteration %d: receive %+v", i, rc)
		}
		if _, err := b.c.Call(proto.OpDestroyQP, proto.Handle{Handle: b.qp.Handle}, nil); err != nil {
			t.Fatal(err)
		}
		if sc := waitN(t, a.scq, 1, "send")[0]; sc.WRID != uint64(i) || sc.Status != proto.WCSuccess {
			m := daemonCounters(t, path)
			t.Fatalf("iteration %d: the delivered Send completed %+v (%v), want success (rd_lingers %d, rd_linger_acks %d)",
				i, sc, sc.Status, m["rd_lingers"], m["rd_linger_acks"])
		}
	}
	m := daemonCounters(t, path)
	loss.mu.Lock()
	dropped := loss.dropped
	loss.mu.Unlock()
	t.Logf("dropped %d; daemon rd_lingers %d rd_lingering %d rd_linger_acks %d",
		dropped, m["rd_lingers"], m["rd_lingering"], m["rd_linger_acks"])
	if m["rd_lingers"] != iterations || m["rd_linger_acks"] == 0 {
		t.Fatalf("daemon counters %v: want %d lingers, some ACKs sent again", m, iterations)
	}
	if n := rdCounters(t, path, a.qp.QPN)["rd_retry_exceeded"]; n != 0 {
		t.Fatalf("rd_retry_exceeded %d", n)
	}
	// Every linger ends after -rd-linger (bounded wait, no timing asserted).
	deadline := time.Now().Add(scaled(30 * time.Second))
	for {
		m = daemonCounters(t, path)
		if m["rd_lingering"] == 0 && m["rd_lingering_peers"] == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("lingers never ended: %v", m)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// A new QP that asks for a lingering port takes it over (the linger ends,
// rd_linger_taken_over); one taking any port skips lingering ones.
func TestRDLingerTakeover(t *testing.T) {
	_, path := startRD(t, func(c *config.Config) { c.RD.Linger = time.Hour })
	a := newRDNode(t, path, 1<<16, 0)
	b := newRDNode(t, path, 1<<16, 0)
	rdExchange(t, a, b, []int{100})
	port := qpPort(t, b.qp.Addr)
	if _, err := b.c.Call(proto.OpDestroyQP, proto.Handle{Handle: b.qp.Handle}, nil); err != nil {
		t.Fatal(err)
	}
	if m := daemonCounters(t, path); m["rd_lingering"] != 1 || m["rd_lingering_peers"] != 1 {
		t.Fatalf("after destroy: %v, want one port lingering with one peer", m)
	}
	caps := proto.QPCaps{MaxSendWR: 16, MaxRecvWR: 16, MaxSendSGE: 1, MaxRecvSGE: 1}
	other, err := b.c.CreateQP(b.pd, b.scq, b.rcq, caps, verbsdtest.QPOptions{Type: proto.QPTypeRD})
	if err != nil {
		t.Fatal(err)
	}
	if qpPort(t, other.Addr) == port {
		t.Fatalf("a new QP took the lingering port %d", port)
	}
	again, err := b.c.CreateQP(b.pd, b.scq, b.rcq, caps, verbsdtest.QPOptions{Type: proto.QPTypeRD, Port: port})
	if err != nil {
		t.Fatalf("a new QP asking for the lingering port %d: %v", port, err)
	}
	if got := qpPort(t, again.Addr); got != port {
		t.Fatalf("port %d, want %d", got, port)
	}
	if m := daemonCounters(t, path); m["rd_lingering"] != 0 || m["rd_linger_taken_over"] != 1 {
		t.Fatalf("after the takeover: %v", m)
	}
}

// qpPort returns the port of a QP's address ("IP:port").
func qpPort(t *testing.T, addr string) uint16 {
	t.Helper()
	ap, err := netip.ParseAddrPort(addr)
	if err != nil {
		t.Fatal(err)
	}
	return ap.Port()
}
