package rd

import (
	"testing"
	"time"

	"github.com/iwarpd/iwarpd/llp/dgram"
)

// firstMessage runs the handshake and a first message (token 1) from a
// (at addrA) to b (at addrB), acknowledged.
func firstMessage(t *testing.T, a, b *Endpoint, now time.Time) {
	t.Helper()
	h, _ := a.Send(now, addrB, 1)
	b.Receive(now, addrA, h, true)
	ch := only(t, b.Poll(now, nil), SendAck)
	a.Receive(now, addrB, ch[0].Header, true)
	rt := only(t, a.Poll(now, nil), Retransmit)
	if v := b.Receive(now, addrA, rt[0].Header, true); v != Deliver {
		t.Fatalf("first DATA with the cookie: %v", v)
	}
	for _, x := range only(t, b.Poll(now, nil), SendAck) {
		a.Receive(now, addrB, x.Header, true)
	}
	if got := only(t, a.Poll(now, nil), Acked); len(got) != 1 {
		t.Fatalf("first message not acked: %v", got)
	}
}

// A receiver that closes while its ACK is delayed hands the ACK over
// (OwedAcks), and the sender completes the message it delivered; without
// it the sender retransmits into the closed QP until it gives up and
// fails a delivered message (issue 10: fi_pingpong's final exchange).
func TestOwedAcksAtClose(t *testing.T) {
	cfg := DefaultConfig()
	cfg.MaxRetries = 3
	for _, close := range []bool{false, true} {
		a := NewEndpoint(cfg, incA)
		b := NewEndpoint(cfg, incB)
		now := t0
		firstMessage(t, a, b, now)
		// The last message: delivered, its ACK delayed.
		now = now.Add(time.Millisecond)
		h, _ := a.Send(now, addrB, 2)
		if v := b.Receive(now, addrA, h, true); v != Deliver {
			t.Fatalf("last DATA: %v", v)
		}
		if got := only(t, b.Poll(now, nil), SendAck); len(got) != 0 {
			t.Fatalf("ACK before AckDelay: %+v", got)
		}
		var last []Action
		if close {
			last = b.OwedAcks(now, nil)
			if len(last) != 1 || last[0].Kind != SendAck || last[0].Peer != addrA ||
				last[0].Header.Flags&dgram.FlagAck == 0 || last[0].Header.CumAck != 3 {
				t.Fatalf("OwedAcks %+v, want one ACK of 1..2 to a", last)
			}
			if again := b.OwedAcks(now, nil); len(again) != 0 {
				t.Fatalf("OwedAcks twice: %+v", again)
			}
		}
		for _, x := range last {
			a.Receive(now, addrB, x.Header, true)
		}
		// b is gone: nothing more arrives from it.
		var acked, failed int
		for i := 0; i < 100 && acked+failed == 0; i++ {
			for _, x := range a.Poll(now, nil) {
				switch x.Kind {
				case Acked:
					acked++
				case Failed:
					failed++
				}
			}
			d, ok := a.NextDeadline()
			if !ok {
				break
			}
			now = d
		}
		if close && (acked != 1 || failed != 0) {
			t.Fatalf("with the ACKs owed at close: %d acked, %d failed; want the delivered message acked", acked, failed)
		}
		if !close && (acked != 0 || failed != 1) {
			t.Fatalf("without them: %d acked, %d failed; want the failure OwedAcks prevents", acked, failed)
		}
	}
}

// OwedAcks also hands over replies queued and not yet taken by Poll
// (here a RESET answering DATA for a previous life), and nothing but
// replies.
func TestOwedAcksQueued(t *testing.T) {
	e := NewEndpoint(DefaultConfig(), incA)
	e.Receive(t0, addrB, data(1, 0), true)
	e.Receive(t0, addrB, data(1, 0x1234), true) // echoes an incarnation not ours: RESET
	got := e.OwedAcks(t0, nil)
	var resets, acks int
	for _, a := range got {
		if a.Kind != SendAck {
			t.Fatalf("OwedAcks returned %v", a.Kind)
		}
		if a.Header.Flags&dgram.FlagReset != 0 {
			resets++
		} else if a.Header.Flags&dgram.FlagAck != 0 {
			acks++
		}
	}
	if resets != 1 || acks != 1 {
		t.Fatalf("OwedAcks %+v: want the queued RESET and the delayed ACK", got)
	}
}
