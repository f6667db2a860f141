package e2e

import (
	"testing"
	"time"

	"github.com/iwarpd/iwarpd/proto"
	"github.com/iwarpd/iwarpd/verbsd/config"
)

// fi_pingpong's teardown: a receiver that destroys its RD QP
// as soon as the last message is in — while the daemon still delays the
// ACK — must not leave its peer retransmitting into a closed port until
// the retry count runs out and failing a delivered message with
// WCRetryExcErr. The daemon sends the ACKs it owes at destroy
// (closeAcks). The ACK delay here is an hour and the peer's RTO half a
// second: before, the Send failed every time (unless the destroy took
// longer than the RTO, when the retransmission's ACKREQ got the ACK).
// The same holds when the receiver's client exits (its session's QPs go
// the same way).
func TestRDDestroyedReceiverAcks(t *testing.T) {
	for _, exit := range []bool{false, true} {
		name := "destroy-qp"
		if exit {
			name = "client-exit"
		}
		t.Run(name, func(t *testing.T) { testRDDestroyedReceiverAcks(t, exit) })
	}
}

func testRDDestroyedReceiverAcks(t *testing.T, exit bool) {
	_, path := startRD(t, func(c *config.Config) {
		c.RD.Link.AckDelay = time.Hour
		c.RD.Link.MinRTO, c.RD.Link.InitialRTO, c.RD.Link.MaxRTO = 500*time.Millisecond, 500*time.Millisecond, 500*time.Millisecond
		c.RD.Link.MaxRetries = 1
	})
	a := newRDNode(t, path, 1<<16, 0)
	b := newRDNode(t, path, 1<<16, 0)
	// The first message carries the handshake (its resend asks for an ACK
	// at once): acknowledged as usual.
	rdExchange(t, a, b, []int{100})
	ah := a.ah(t, b)
	b.recv(t, 2000, 0, 1000)
	a.post(t, proto.SQE{WRID: 2, Opcode: proto.WRSend, Flags: proto.SendSignaled, AH: ah}, []proto.SGE{a.mr.SGE(0, 1000)})
	if rc := waitN(t, b.rcq, 1, "last receive")[0]; rc.Status != proto.WCSuccess || rc.WRID != 2000 {
		t.Fatalf("last receive %+v", rc)
	}
	if exit {
		b.c.Close()
	} else if _, err := b.c.Call(proto.OpDestroyQP, proto.Handle{Handle: b.qp.Handle}, nil); err != nil {
		t.Fatal(err)
	}
	sc := waitN(t, a.scq, 1, "send")[0]
	if sc.WRID != 2 || sc.Status != proto.WCSuccess {
		t.Fatalf("the delivered Send completed %+v (%v), want success: the destroyed QP's ACK never left", sc, sc.Status)
	}
	if n := rdCounters(t, path, a.qp.QPN)["rd_retry_exceeded"]; n != 0 {
		t.Fatalf("rd_retry_exceeded %d", n)
	}
}
