package rd

import (
	"errors"
	"reflect"
	"testing"
	"time"

	"github.com/iwarpd/iwarpd/llp/dgram"
)

// sendEach is what SendRun stands for: Send for tok, tok+1, … until n
// went or the window closed.
func sendEach(e *Endpoint, now time.Time, tok Token, n int) ([]dgram.RDHeader, error) {
	var hs []dgram.RDHeader
	for i := range n {
		h, err := e.Send(now, addrB, tok+Token(i))
		if err != nil {
			if i == 0 {
				return nil, err
			}
			break
		}
		hs = append(hs, h)
	}
	return hs, nil
}

// runHeaders expands a run into its headers.
func runHeaders(r SentRun) []dgram.RDHeader {
	var hs []dgram.RDHeader
	for i := range r.N {
		hs = append(hs, r.Header(i))
	}
	return hs
}

// twins are two endpoints with the same history: each sends by Send, run
// by SendRun.
type twins struct{ each, run *Endpoint }

func newTwins(cfg Config) *twins {
	return &twins{NewEndpoint(cfg, incA), NewEndpoint(cfg, incA)}
}

// both applies f to both endpoints.
func (tw *twins) both(f func(e *Endpoint)) {
	f(tw.each)
	f(tw.run)
}

// send sends n datagrams from tok on, each way, and checks that the
// headers, the errors, the counters and the next deadline agree.
func (tw *twins) send(t *testing.T, what string, now time.Time, tok Token, n int) []dgram.RDHeader {
	t.Helper()
	room := tw.run.SendRoom(addrB)
	want, werr := sendEach(tw.each, now, tok, n)
	if (room != len(want) && len(want) < n) || room < len(want) {
		t.Fatalf("%s: SendRoom %d, Send took %d of %d", what, room, len(want), n)
	}
	r, err := tw.run.SendRun(now, addrB, tok, n)
	got := runHeaders(r)
	if (err == nil) != (werr == nil) || errors.Is(err, ErrWindowClosed) != errors.Is(werr, ErrWindowClosed) {
		t.Fatalf("%s: SendRun error %v, Send's %v", what, err, werr)
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("%s: SendRun headers\n%+v\nSend's\n%+v", what, got, want)
	}
	tw.same(t, what)
	return got
}

// same checks that the twins' observable state agrees.
func (tw *twins) same(t *testing.T, what string) {
	t.Helper()
	if a, b := tw.each.Stats(), tw.run.Stats(); a != b {
		t.Fatalf("%s: stats %+v, Send's %+v", what, b, a)
	}
	da, oka := tw.each.NextDeadline()
	db, okb := tw.run.NextDeadline()
	if oka != okb || !da.Equal(db) {
		t.Fatalf("%s: next deadline %v %v, Send's %v %v", what, db, okb, da, oka)
	}
	if a, b := tw.each.CanSend(addrB), tw.run.CanSend(addrB); a != b {
		t.Fatalf("%s: CanSend %v, Send's %v", what, b, a)
	}
}

// poll polls both at now and checks that the actions agree; it returns them.
func (tw *twins) poll(t *testing.T, what string, now time.Time) []Action {
	t.Helper()
	a := tw.each.Poll(now, nil)
	b := tw.run.Poll(now, nil)
	if !reflect.DeepEqual(a, b) {
		t.Fatalf("%s: actions\n%+v\nSend's\n%+v", what, b, a)
	}
	tw.same(t, what)
	return a
}

// TestSendRunEqualsSends: a run leaves the state and headers of as many
// calls of Send, whatever limits it: the window of datagrams in flight
// (ACKREQ on the datagram that fills it), the window the peer advertised,
// the probe allowed when nothing is outstanding, SACKed datagrams, the
// piggybacked acknowledgement and the cookie of a new peer.
func TestSendRunEqualsSends(t *testing.T) {
	ms := func(n int) time.Time { return t0.Add(time.Duration(n) * time.Millisecond) }
	t.Run("new peer, cookie, room to spare", func(t *testing.T) {
		tw := newTwins(DefaultConfig())
		if hs := tw.send(t, "run", t0, 100, 10); len(hs) != 10 || hs[9].Flags&dgram.FlagAckReq != 0 || hs[0].Seq != 1 {
			t.Fatalf("headers %+v", hs)
		}
		tw.send(t, "second run", ms(1), 110, 5)
		tw.poll(t, "timeouts", ms(40))
	})
	t.Run("window of datagrams in flight", func(t *testing.T) {
		cfg := DefaultConfig()
		cfg.Window = 8
		for _, n := range []int{7, 8, 9, 30} {
			tw := newTwins(cfg)
			hs := tw.send(t, "run", t0, 1, n)
			if len(hs) != min(n, 8) || (hs[len(hs)-1].Flags&dgram.FlagAckReq != 0) != (n >= 8) {
				t.Fatalf("n %d: headers %+v", n, hs)
			}
			tw.send(t, "beyond", t0, 50, 3) // closed, or the one room left
		}
	})
	t.Run("advertised window, probe, SACKed", func(t *testing.T) {
		cfg := DefaultConfig()
		cfg.Window = 16
		tw := newTwins(cfg)
		tw.send(t, "first", t0, 1, 6)
		tw.both(func(e *Endpoint) { e.Receive(ms(1), addrB, ack(3, 0, 5), true) }) // 1, 2 acked; room up to 7
		tw.poll(t, "acked", ms(1))
		if hs := tw.send(t, "peer's window", ms(1), 10, 20); len(hs) != 1 || hs[0].Seq != 7 || hs[0].Flags&dgram.FlagAckReq == 0 {
			t.Fatalf("headers %+v", hs)
		}
		tw.both(func(e *Endpoint) { e.Receive(ms(2), addrB, ack(8, 0, 0), true) }) // all acked, window 0
		tw.poll(t, "all acked", ms(2))
		if hs := tw.send(t, "probe", ms(2), 20, 4); len(hs) != 1 || hs[0].Seq != 8 {
			t.Fatalf("probe headers %+v", hs)
		}
		tw.both(func(e *Endpoint) { e.Receive(ms(3), addrB, ack(8, 0b110, 40), true) }) // 8 missing, 9, 10 not sent
		tw.send(t, "after the probe", ms(3), 30, 20)
		tw.both(func(e *Endpoint) { e.Receive(ms(4), addrB, ack(8, 0b1111_0110, 40), true) }) // 9, 10, 12..15 SACKed
		tw.poll(t, "sacked", ms(4))
		tw.send(t, "with SACKed ones", ms(4), 60, 40)
	})
	t.Run("piggybacked ack", func(t *testing.T) {
		tw := newTwins(DefaultConfig())
		tw.send(t, "first", t0, 1, 1)
		tw.both(func(e *Endpoint) {
			e.Receive(ms(1), addrB, ack(2, 0, 100), true)
			e.Receive(ms(1), addrB, data(1, incA), true)
			e.Receive(ms(1), addrB, data(3, incA), true) // 2 missing: 3 held, SACKed
		})
		hs := tw.send(t, "run", ms(1), 10, 12)
		if hs[0].Flags&dgram.FlagAck == 0 || hs[0].CumAck != 2 || hs[0].SACK != 1 || hs[11].Seq != 13 {
			t.Fatalf("headers %+v", hs)
		}
		tw.poll(t, "after", ms(2))
	})
}

// TestSendRunLossInTheMiddle: datagrams lost in the middle of a run are
// resent alone, each with its own token, sequence number and ACKREQ; the
// SACKed ones around them are not; a run's oldest datagram has the
// retransmission timer, as after Send.
func TestSendRunLossInTheMiddle(t *testing.T) {
	ms := func(n int) time.Time { return t0.Add(time.Duration(n) * time.Millisecond) }
	tw := newTwins(DefaultConfig())
	tw.send(t, "run", t0, 1000, 40) // seqs 1..40, tokens 1000..1039
	// 1..10 arrived, 11..14 lost, 15..40 arrived (SACK bit i: seq 12+i).
	var sack uint32
	for s := uint32(15); s <= 40; s++ {
		sack |= 1 << (s - 12)
	}
	tw.both(func(e *Endpoint) { e.Receive(ms(1), addrB, ack(11, sack, 200), true) })
	acts := tw.poll(t, "ack", ms(1))
	if got := only(t, acts, Acked); len(got) != 10 || got[0].Token != 1000 || got[9].Token != 1009 {
		t.Fatalf("acked %+v", got)
	}
	acts = tw.poll(t, "reordering window passed", ms(3))
	re := only(t, acts, Retransmit)
	if len(re) != 4 {
		t.Fatalf("retransmissions %+v, want seqs 11..14", re)
	}
	for i, a := range re {
		if a.Token != Token(1010+i) || a.Header.Seq != uint32(11+i) || a.Header.Flags&dgram.FlagAckReq == 0 {
			t.Fatalf("retransmission %d: %+v", i, a)
		}
	}
	if len(acts) != len(re) {
		t.Fatalf("actions %+v", acts)
	}
	// 12 is lost again; 11, 13, 14 arrive: only 12 goes again, once a
	// datagram sent after its retransmission is SACKed.
	us := func(n int) time.Time { return t0.Add(time.Duration(n) * time.Microsecond) }
	tw.send(t, "more", us(3100), 2000, 2) // seqs 41, 42
	const upTo40 = 1<<28 - 1              // SACK bits of 13..40 (bit i: seq 13+i)
	tw.both(func(e *Endpoint) { e.Receive(us(3500), addrB, ack(12, upTo40, 200), true) })
	acts = tw.poll(t, "second ack", us(3500))
	if got := only(t, acts, Acked); len(got) != 1 || got[0].Token != 1010 || len(only(t, acts, Retransmit)) != 0 {
		t.Fatalf("actions %+v", acts)
	}
	tw.both(func(e *Endpoint) { e.Receive(us(4500), addrB, ack(12, upTo40|3<<28, 200), true) }) // 41, 42, sent after, SACKed
	acts = tw.poll(t, "third ack", us(4500))
	if re := only(t, acts, Retransmit); len(re) != 1 || re[0].Token != 1011 || re[0].Header.Seq != 12 {
		t.Fatalf("retransmissions %+v, want seq 12 alone", re)
	}
}

// TestSendRunRing: runs grow the ring as Sends do, wrapping around it.
func TestSendRunRing(t *testing.T) {
	cfg := DefaultConfig()
	cfg.Window = 64
	tw := newTwins(cfg)
	now := t0
	next, acked := uint32(1), uint32(1)
	for round := range 40 {
		now = now.Add(100 * time.Microsecond)
		n := 1 + round*7%23
		hs := tw.send(t, "run", now, Token(next), n)
		next += uint32(len(hs))
		acked = min(next, acked+uint32(round%5)*3)
		tw.both(func(e *Endpoint) { e.Receive(now, addrB, ack(acked, 0, 64), true) })
		tw.poll(t, "acked", now)
	}
	if tw.run.Stats().Sent < 200 {
		t.Fatalf("sent %d", tw.run.Stats().Sent)
	}
}

// BenchmarkSendRun: assigning the 725 datagrams of a 1 MiB message (1448
// octets each; llp/rd sees no octets) with one SendRun per 256 against
// one Send per datagram, each 256 acknowledged by one ACK (ns/datagram:
// the whole send half).
func BenchmarkSendRun(b *testing.B) {
	const dgrams = 725
	cfg := DefaultConfig()
	cfg.Window = 256
	for _, mode := range []string{"each", "run"} {
		b.Run(mode, func(b *testing.B) {
			e := NewEndpoint(cfg, incA)
			now := t0
			seq := uint32(1)
			var acts []Action
			b.ReportAllocs()
			for b.Loop() {
				for sent := 0; sent < dgrams; {
					n := min(dgrams-sent, 256)
					if mode == "each" {
						for i := range n {
							if _, err := e.Send(now, addrB, Token(sent+i)); err != nil {
								b.Fatal(err)
							}
						}
					} else if r, err := e.SendRun(now, addrB, Token(sent), n); err != nil || r.N != n {
						b.Fatal(r.N, err)
					}
					sent += n
					seq += uint32(n)
					e.Receive(now, addrB, ack(seq, 0, 1024), true)
					acts = e.Poll(now, acts[:0])
					now = now.Add(time.Microsecond)
				}
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*dgrams), "ns/datagram")
		})
	}
}
