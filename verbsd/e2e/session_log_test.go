package e2e

import (
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/iwarpd/iwarpd/proto"
	"github.com/iwarpd/iwarpd/verbsd/config"
	"github.com/iwarpd/iwarpd/verbsd/verbsdtest"
)

// TestSessionStartEndLogged (issue 19 item 8): a session's start and end
// are one info line each, the end saying why and what the teardown
// reclaimed.
func TestSessionStartEndLogged(t *testing.T) {
	var log logLines
	_, path := startRD(t, func(c *config.Config) { c.Log = &log })
	n := newRDNode(t, path, 1<<16, 0) // 1 PD, 1 MR, 2 CQs, 1 RD QP
	log.wait(t, "started: client", fmt.Sprintf("pid %d", os.Getpid()))
	n.c.Close()
	l := log.wait(t, "ended: client", "the client closed its connection", "reclaimed 1 QPs, 1 MRs, 2 CQs")
	t.Log(l)
}

// TestSessionLogRateLimited: a client opening and closing sessions in a
// loop gets Burst lines into the log, not one per session.
func TestSessionLogRateLimited(t *testing.T) {
	var log logLines
	srv, path := startRD(t, func(c *config.Config) { c.Log = &log })
	srv.Device().EventLog.Set(3, time.Hour) // no refill within the test
	for range 10 {
		c, err := verbsdtest.Dial(path, false)
		if err != nil {
			t.Fatal(err)
		}
		c.Close()
	}
	deadline := time.Now().Add(rdWait())
	for {
		left := srv.SessionCount()
		if left == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d sessions still open", left)
		}
		time.Sleep(time.Millisecond)
	}
	log.mu.Lock()
	defer log.mu.Unlock()
	n := 0
	for _, l := range log.lines {
		if strings.Contains(l, "started: client") || strings.Contains(l, "ended: client") {
			n++
		}
	}
	if n != 3 {
		t.Fatalf("%d session lines for 10 sessions with a burst of 3 and no refill, want 3:\n%s", n, strings.Join(log.lines, "\n"))
	}
}

// TestRDPeerDeadLogged: an RD peer given up on is one info line naming the
// QP, the peer and how many datagrams were given up.
func TestRDPeerDeadLogged(t *testing.T) {
	var log logLines
	_, path := startRD(t, func(c *config.Config) {
		c.Log = &log
		c.RD.Link.MaxRetries = 4
		c.RD.Link.MaxRTO = 20 * time.Millisecond
	})
	a := newRDNode(t, path, 1<<20, 0)
	b := newRDNode(t, path, 1<<20, 0)
	ahB := a.ah(t, b)
	b.c.Close() // the peer's QP (and socket) goes away
	a.post(t, proto.SQE{WRID: 1, Opcode: proto.WRSend, Flags: proto.SendSignaled, AH: ahB}, []proto.SGE{a.mr.SGE(0, 5000)})
	if sc := waitN(t, a.scq, 1, "send to a dead peer")[0]; sc.Status != proto.WCRetryExcErr {
		t.Fatalf("completion %+v, want retry exceeded", sc)
	}
	l := log.wait(t, fmt.Sprintf("RD QP %d (QPN %d): peer %v declared dead", a.qp.Handle, a.qp.QPN, b.qp.Addr),
		"outstanding datagram(s) given up")
	t.Log(l)
}

// TestSessionRefusedLogged: a hello the daemon refuses (here the per-user
// session limit) is an info line too, with the reason the client got.
func TestSessionRefusedLogged(t *testing.T) {
	var log logLines
	_, path := startRD(t, func(c *config.Config) {
		c.Log = &log
		c.UserLimits.Sessions = 1
	})
	first, err := verbsdtest.Dial(path, false)
	if err != nil {
		t.Fatal(err)
	}
	defer first.Close()
	if c, err := verbsdtest.Dial(path, false); err == nil {
		c.Close()
		t.Fatal("a second session past the limit of 1 was accepted")
	}
	t.Log(log.wait(t, "refused: pid", "user-max-sessions"))
}
