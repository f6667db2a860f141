package e2e

import (
	"net/netip"
	"testing"
	"time"

	"github.com/iwarpd/iwarpd/proto"
	"github.com/iwarpd/iwarpd/verbsd/config"
	"github.com/iwarpd/iwarpd/verbsd/verbsdtest"
	"golang.org/x/sys/unix"
)

// TestRDLingerClientSocket: a destroyed RD QP whose socket is its client's
// own (ABI 5, docs/security.md "Client-made QP sockets") lingers on the
// daemon's copy (docs/rd.md "Destroying a QP"); the client shutting its
// copy down ends that linger at once (its hang-up, level-triggered, would
// otherwise wake every pass for the hour the linger lasts), and the engine
// goes on serving. A live RD QP whose client shuts its socket down moves
// to ERROR and stays there; the engine goes on serving.
func TestRDLingerClientSocket(t *testing.T) {
	_, path := startRD(t, func(c *config.Config) { c.RD.Linger = time.Hour })
	a := newRDNode(t, path, 1<<16, 0)
	b := newRDNode(t, path, 1<<16, 0)
	addr, err := b.c.ReservePort(proto.QPTypeRD, 0)
	if err != nil {
		t.Fatal(err)
	}
	ap := netip.MustParseAddrPort(addr)
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_NONBLOCK|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(fd)
	if err := unix.Bind(fd, &unix.SockaddrInet4{Port: int(ap.Port()), Addr: ap.Addr().As4()}); err != nil {
		t.Fatal(err)
	}
	caps := proto.QPCaps{MaxSendWR: 16, MaxRecvWR: 16, MaxSendSGE: 1, MaxRecvSGE: 1}
	qp, err := b.c.CreateQP(b.pd, b.scq, b.rcq, caps, verbsdtest.QPOptions{Type: proto.QPTypeRD, Port: ap.Port(), Socket: fd, HasSocket: true})
	if err != nil {
		t.Fatal(err)
	}
	if err := qp.ToRTS(); err != nil {
		t.Fatal(err)
	}
	b.qp = qp
	send := func(to *rdNode, wrid uint64) {
		t.Helper()
		to.recv(t, wrid, 0, 100)
		a.post(t, proto.SQE{WRID: wrid, Opcode: proto.WRSend, Flags: proto.SendSignaled, AH: a.ah(t, to)}, []proto.SGE{a.mr.SGE(0, 100)})
		if rc := waitN(t, to.rcq, 1, "receive")[0]; rc.Status != proto.WCSuccess || rc.WRID != wrid {
			t.Fatalf("receive %+v", rc)
		}
		if sc := waitN(t, a.scq, 1, "send")[0]; sc.Status != proto.WCSuccess || sc.WRID != wrid {
			t.Fatalf("send %+v", sc)
		}
	}
	send(b, 1)
	if _, err := b.c.Call(proto.OpDestroyQP, proto.Handle{Handle: qp.Handle}, nil); err != nil {
		t.Fatal(err)
	}
	lingering := func(want int64) bool {
		m := daemonCounters(t, path)
		return m["rd_lingering"] == want
	}
	waitUntil(t, "the destroyed QP's client socket lingers", func() bool { return lingering(1) })
	unix.Shutdown(fd, unix.SHUT_RDWR)
	waitUntil(t, "the linger of a client socket shut down ends", func() bool { return lingering(0) })
	send(newRDNode(t, path, 1<<16, 0), 2)

	// A live RD QP whose client shuts its socket down: that QP moves to
	// ERROR for good, the engine goes on.
	addr, err = b.c.ReservePort(proto.QPTypeRD, 0)
	if err != nil {
		t.Fatal(err)
	}
	ap = netip.MustParseAddrPort(addr)
	fd2, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_NONBLOCK|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(fd2)
	if err := unix.Bind(fd2, &unix.SockaddrInet4{Port: int(ap.Port()), Addr: ap.Addr().As4()}); err != nil {
		t.Fatal(err)
	}
	qp2, err := b.c.CreateQP(b.pd, b.scq, b.rcq, caps, verbsdtest.QPOptions{Type: proto.QPTypeRD, Port: ap.Port(), Socket: fd2, HasSocket: true})
	if err != nil {
		t.Fatal(err)
	}
	if err := qp2.ToRTS(); err != nil {
		t.Fatal(err)
	}
	b.qp = qp2
	send(b, 3)
	unix.Shutdown(fd2, unix.SHUT_RD)
	waitUntil(t, "the RD QP whose socket was shut down moves to ERROR", func() bool {
		in, err := b.c.Inspect()
		if err != nil {
			t.Fatal(err)
		}
		for _, s := range in.Sessions {
			for _, q := range s.QPs {
				if q.Addr == addr {
					return q.State == "ERROR" && q.ClientSocket
				}
			}
		}
		return false
	})
	if err := qp2.Modify(proto.QPStateReset); err == nil {
		t.Fatal("an RD QP whose socket failed left ERROR")
	}
	send(newRDNode(t, path, 1<<16, 0), 4)
}

// waitUntil waits (bounded: rdWait) until cond holds.
func waitUntil(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(rdWait())
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within %v", what, rdWait())
		}
		time.Sleep(5 * time.Millisecond)
	}
}
