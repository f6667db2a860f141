package e2e

import (
	"errors"
	"testing"
	"time"

	"github.com/iwarpd/iwarpd/proto"
	"github.com/iwarpd/iwarpd/verbsd/config"
	"github.com/iwarpd/iwarpd/verbsd/rnic"
	"github.com/iwarpd/iwarpd/verbsd/verbsdtest"
)

// backlogSize is the message size of message i of the backlog tests:
// mostly one small datagram (so that the sender's GSO puts many in one
// buffer and, with GRO, the receiver gets them in one), now and then an
// empty one and one of four datagrams (reassembled).
func backlogSize(i int) int {
	switch {
	case i%50 == 49:
		return 5000
	case i%50 == 25:
		return 0
	}
	return 64
}

// TestUDBacklog: datagrams that arrive before any receive is
// posted wait in the QP's socket (ud/backlog.go): the engine parks the QP,
// reads nothing and does not spin; once receives are posted — a few at a
// time, so that a GRO buffer holds more messages than there are receives
// — every message is delivered, in order, intact, and nothing is dropped.
// With UDP GRO (the default) and without.
func TestUDBacklog(t *testing.T) {
	for _, tc := range []struct {
		name string
		gro  bool
	}{{"gro", true}, {"nogro", false}} {
		t.Run(tc.name, func(t *testing.T) {
			srv, path := startFast(t, func(c *config.Config) { c.GRO = tc.gro })
			a, b := newFastNode(t, path, 2<<20), newFastNode(t, path, 2<<20)
			const count, slot, chunk = 120, 5008, 7
			ah, err := a.c.CreateAH(a.pd, b.qp.Addr)
			if err != nil {
				t.Fatal(err)
			}
			datagrams := int64(0)
			for i := range count {
				size := backlogSize(i)
				datagrams += int64(max(1, (size+1449)/1450))
				fillBacklogMsg(a.mr.Buf[i*slot:i*slot+size], i)
				e := proto.SQE{WRID: uint64(i), Opcode: proto.WRSend, Flags: proto.SendSignaled, AH: ah}
				if err := postBounded(a, e, []proto.SGE{a.mr.SGE(i*slot, size)}); err != nil {
					t.Fatal(err)
				}
			}
			if got := a.scq.Wait(count, roundWait); len(got) != count {
				t.Fatalf("%d of %d send completions", len(got), count)
			}
			// No receive posted: b is parked and has read nothing.
			var c map[string]int64
			deadline := time.Now().Add(roundWait)
			for c = qpStats(t, path, b.qp.QPN); c["recv_parked"] == 0 && time.Now().Before(deadline); c = qpStats(t, path, b.qp.QPN) {
				time.Sleep(time.Millisecond)
			}
			if c["recv_parked"] == 0 || c["datagrams_in"] != 0 || c["drop_no_recv"] != 0 {
				t.Fatalf("before any receive: recv_parked %d datagrams_in %d drop_no_recv %d, want ≥ 1, 0, 0",
					c["recv_parked"], c["datagrams_in"], c["drop_no_recv"])
			}
			// While they wait, the engine sleeps: a readable socket it does
			// not read would wake every epoll_wait (and count a wake-up
			// each time). The two reads of the counters wake it once each.
			e0, p0 := engineWakeups(t, srv.Device().Engs[0])
			time.Sleep(200 * time.Millisecond)
			e1, p1 := engineWakeups(t, srv.Device().Engs[0])
			t.Logf("idle with %d messages waiting: %d wake-ups, %d passes", count, e1-e0, p1-p0)
			if e1-e0 > 10 {
				t.Errorf("the engine woke %d times while the messages waited for receives (passes %d): it spins", e1-e0, p1-p0)
			}
			// Receives, chunk at a time: every message in order.
			for next := 0; next < count; {
				n := min(chunk, count-next)
				for k := range n {
					i := next + k
					if err := b.c.PostRecv(b.qp.RQ, uint64(i), []proto.SGE{b.mr.SGE(i*slot, slot)}); err != nil {
						t.Fatal(err)
					}
				}
				got := b.rcq.Wait(n, roundWait)
				if len(got) != n {
					t.Fatalf("messages %d..%d: %d receive completions, want %d (counters %v)", next, next+n-1, len(got), n,
						qpStats(t, path, b.qp.QPN))
				}
				for k, r := range got {
					i := next + k
					size := backlogSize(i)
					if r.Status != proto.WCSuccess || r.WRID != uint64(i) || int(r.ByteLen) != size {
						t.Fatalf("receive completion %d: %+v (size %d)", i, r, size)
					}
					want := make([]byte, size)
					fillBacklogMsg(want, i)
					if string(b.mr.Buf[i*slot:i*slot+size]) != string(want) {
						t.Fatalf("message %d (%d octets) differs", i, size)
					}
				}
				next += n
			}
			c = qpStats(t, path, b.qp.QPN)
			t.Logf("receiver: %v", c)
			if c["messages_in"] != count || c["datagrams_in"] != datagrams || c["drop_no_recv"] != 0 ||
				c["drop_socket_full"] != 0 || c["drop_not_ready"] != 0 {
				t.Errorf("messages_in %d datagrams_in %d (want %d, %d), drop_no_recv %d drop_socket_full %d drop_not_ready %d, want 0",
					c["messages_in"], c["datagrams_in"], count, datagrams, c["drop_no_recv"], c["drop_socket_full"], c["drop_not_ready"])
			}
			if c["gro_coalesced"] > 0 && c["recv_held"] == 0 {
				t.Errorf("GRO buffers of several messages (%d) read %d receives at a time, none held", c["gro_coalesced"], chunk)
			}
			if c["recv_held"] != c["recv_held_judged"] {
				t.Errorf("%d datagrams held, %d judged", c["recv_held"], c["recv_held_judged"])
			}
		})
	}
}

func fillBacklogMsg(b []byte, i int) {
	for j := range b {
		b[j] = byte(i*31 + j*7 + j>>8)
	}
}

// postBounded posts e, waiting (bounded) while the SQ is full.
func postBounded(n *fastNode, e proto.SQE, sges []proto.SGE) error {
	deadline := time.Now().Add(roundWait)
	for {
		err := n.qp.PostSend(e, sges, nil)
		if !errors.Is(err, verbsdtest.ErrFull) || time.Now().After(deadline) {
			return err
		}
		time.Sleep(50 * time.Microsecond)
	}
}

// engineWakeups returns how often the engine came out of epoll_wait (the
// status page's epoch) and its passes.
func engineWakeups(t *testing.T, e *rnic.Engine) (wakeups uint32, passes uint64) {
	t.Helper()
	if err := e.Do(func() error { wakeups, passes = e.Epoch.Load(), e.Passes; return nil }); err != nil {
		t.Fatal(err)
	}
	return wakeups, passes
}
