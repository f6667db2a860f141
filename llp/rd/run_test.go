package rd

import (
	"reflect"
	"testing"
	"time"

	"github.com/iwarpd/iwarpd/llp/dgram"
)

// runPeer brings an endpoint to the state of a bulk receive from addrB:
// one DATA of ours outstanding to it, its DATA 1 (with the cookie) and 2
// (acknowledging ours) delivered. It returns the endpoint and header 2,
// the opener of a run.
func runPeer(t *testing.T) (*Endpoint, dgram.RDHeader) {
	t.Helper()
	e := NewEndpoint(Config{}, incA)
	if _, err := e.Send(t0, addrB, 7); err != nil {
		t.Fatal(err)
	}
	if v := e.Receive(t0, addrB, data(1, 0), true); v != Deliver {
		t.Fatalf("DATA 1: %v", v)
	}
	h := dgram.RDHeader{Version: dgram.RDVersion, Type: dgram.RDData, Flags: dgram.FlagAck | dgram.FlagExtSACK, Window: 512,
		Incarnation: incB, EchoedIncarnation: incA, Seq: 2, CumAck: 2}
	if v := e.Receive(t0, addrB, h, true); v != Deliver {
		t.Fatalf("DATA 2: %v", v)
	}
	return e, h
}

// TestRunEqualsReceive: a run of datagrams taken and committed leaves the
// endpoint as Receive of each does: the same counters, actions (the ACK,
// its fields) and timers; the datagrams after it are judged alike.
func TestRunEqualsReceive(t *testing.T) {
	slow, h := runPeer(t)
	fast, _ := runPeer(t)
	var run Run
	if !fast.OpenRun(addrB, &h, &run) {
		t.Fatal("OpenRun refused a proven in-order peer")
	}
	t1 := t0.Add(50 * time.Microsecond)
	for seq := uint32(3); seq <= 47; seq++ {
		x := h
		x.Seq = seq
		if seq == 30 {
			x.Flags |= dgram.FlagAckReq
		}
		if v := slow.Receive(t1, addrB, x, true); v != Deliver {
			t.Fatalf("Receive %d: %v", seq, v)
		}
		if !run.Take(seq, seq == 30) {
			t.Fatalf("Take %d refused", seq)
		}
	}
	if run.Pending() != 45 || !run.Commit(t1) || run.Pending() != 0 {
		t.Fatalf("Commit: pending %d", run.Pending())
	}
	compare := func(when string) {
		t.Helper()
		if slow.Stats() != fast.Stats() {
			t.Fatalf("%s: stats\n%+v\n%+v", when, slow.Stats(), fast.Stats())
		}
		d1, ok1 := slow.NextDeadline()
		d2, ok2 := fast.NextDeadline()
		if ok1 != ok2 || !d1.Equal(d2) {
			t.Fatalf("%s: deadline %v %v / %v %v", when, d1, ok1, d2, ok2)
		}
		a1, a2 := slow.Poll(t1, nil), fast.Poll(t1, nil)
		if !reflect.DeepEqual(a1, a2) {
			t.Fatalf("%s: actions\n%+v\n%+v", when, a1, a2)
		}
	}
	compare("after the run")
	// What follows is judged alike: the next, a duplicate, a hole.
	for _, seq := range []uint32{48, 20, 50, 49} {
		x := h
		x.Seq = seq
		if v1, v2 := slow.Receive(t1, addrB, x, true), fast.Receive(t1, addrB, x, true); v1 != v2 {
			t.Fatalf("DATA %d: %v / %v", seq, v1, v2)
		}
	}
	compare("after the datagrams that follow")
}

// TestRunRefused: OpenRun and Take refuse whatever Receive would not
// deliver as the next datagram, and Commit refuses a run whose peer the
// endpoint moved meanwhile.
func TestRunRefused(t *testing.T) {
	t.Run("unproven", func(t *testing.T) {
		e := NewEndpoint(Config{}, incA)
		h := data(1, 0)
		h.CumAck = 0 // no cookie: not taken
		if v := e.Receive(t0, addrB, h, true); v != Unproven {
			t.Fatalf("DATA without cookie: %v", v)
		}
		var run Run
		if e.OpenRun(addrB, &h, &run) || run.Take(2, false) {
			t.Fatal("run opened for an unproven peer")
		}
	})
	t.Run("not the last delivered", func(t *testing.T) {
		e, h := runPeer(t)
		h.Seq = 1
		var run Run
		if e.OpenRun(addrB, &h, &run) {
			t.Fatal("run opened after DATA 1 with DATA 2 delivered")
		}
	})
	t.Run("held", func(t *testing.T) {
		e, h := runPeer(t)
		x := h
		x.Seq = 4
		if v := e.Receive(t0, addrB, x, true); v != Hold {
			t.Fatalf("DATA 4: %v", v)
		}
		var run Run
		if e.OpenRun(addrB, &h, &run) {
			t.Fatal("run opened with a datagram held")
		}
	})
	for name, mutate := range map[string]func(*dgram.RDHeader){
		"SACK":              func(h *dgram.RDHeader) { h.SACK = 1 },
		"NOTREADY":          func(h *dgram.RDHeader) { h.Flags |= dgram.FlagNotReady },
		"other incarnation": func(h *dgram.RDHeader) { h.Incarnation++ },
		"acks unsent":       func(h *dgram.RDHeader) { h.CumAck = 9 },
	} {
		t.Run(name, func(t *testing.T) {
			e, h := runPeer(t)
			mutate(&h)
			var run Run
			if e.OpenRun(addrB, &h, &run) {
				t.Fatalf("run opened after %+v", h)
			}
		})
	}
	t.Run("hole and duplicate", func(t *testing.T) {
		e, h := runPeer(t)
		var run Run
		if !e.OpenRun(addrB, &h, &run) {
			t.Fatal("OpenRun refused")
		}
		if run.Take(4, false) || run.Take(2, false) || !run.Take(3, false) || run.Take(3, false) {
			t.Fatal("Take took a hole or a duplicate, or refused the next")
		}
		if !run.Commit(t0) {
			t.Fatal("Commit refused")
		}
		x := h
		x.Seq = 3
		if v := e.Receive(t0, addrB, x, true); v != Duplicate {
			t.Fatalf("DATA 3 after the run: %v, want Duplicate", v)
		}
	})
	t.Run("endpoint moved", func(t *testing.T) {
		e, h := runPeer(t)
		var run Run
		if !e.OpenRun(addrB, &h, &run) || !run.Take(3, false) {
			t.Fatal("run refused")
		}
		x := h
		x.Seq = 3
		e.Receive(t0, addrB, x, true) // the engine broke the contract
		before := e.Stats()
		if run.Commit(t0) || run.Take(4, false) || e.Stats() != before {
			t.Fatal("Commit applied a run the endpoint moved past")
		}
	})
}
