package e2e

import (
	"fmt"
	"testing"
	"time"

	"github.com/iwarpd/iwarpd/iwerr"
	"github.com/iwarpd/iwarpd/proto"
	"github.com/iwarpd/iwarpd/rdmap"
	"github.com/iwarpd/iwarpd/verbsd/config"
	"github.com/iwarpd/iwarpd/verbsd/rc"
)

// Tests of RC receive batching (rc/rxbuf.go): a raw peer writes FPDUs in
// bursts (many in one write) and one octet at a time, with CRC and markers
// on and off; the engine must place and complete them all, in order.

// rcRxModes are the MPA settings the receive tests run under.
var rcRxModes = []struct {
	name         string
	crc, markers bool
}{
	{"crc", true, false},
	{"nocrc", false, false},
	{"crc-markers", true, true},
	{"markers", false, true},
}

// rcRxPayload is the payload of the i-th test Send (sizes vary, so the
// FPDUs have every PAD length and end at every offset of a read).
func rcRxPayload(i, n int) []byte {
	p := make([]byte, n)
	for k := range p {
		p[k] = byte(i*31 + k*7 + 1)
	}
	return p
}

// rcRxNoBuffer checks that n's connection holds no receive buffer (an
// idle connection gives it back to the pool).
func rcRxNoBuffer(t *testing.T, n *rcEnd) {
	t.Helper()
	err := n.engineQP(func(q *rc.QP) error {
		if st := q.RxState(); st.HoldsBuffer || st.Buffered > 0 {
			return fmt.Errorf("idle connection holds a receive buffer (%d octets pending)", st.Buffered)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// TestRCRxBurst: a raw peer writes 50 Sends of 90..139 octets in one
// write; the engine completes the 50 receives in order with every octet
// in place, reading the burst with a few readv calls (recv_calls), where
// one readv per FPDU or two (the 256-octet look-ahead it had before) took
// dozens. With PollBatch 8 the burst spans passes: what one pass leaves in
// the buffer is served by the next.
func TestRCRxBurst(t *testing.T) {
	const k = 50
	for _, tc := range rcRxModes {
		for _, batch := range []int{64, 8} {
			t.Run(fmt.Sprintf("%s/batch%d", tc.name, batch), func(t *testing.T) {
				srv, path := rcServer(t, func(c *config.Config) { c.PollBatch = batch })
				b := newRCEnd(t, srv, path, rcOpts{bufSize: 1 << 16})
				p, _ := rcParams(tc.crc, tc.markers, 4, 4)
				r := connectRaw(t, b, p, false, 0)
				var burst []byte
				var want [][]byte
				for i := range k {
					b.postRecv(uint64(i), b.mr.SGE(i*256, 256))
					pl := rcRxPayload(i, 90+i)
					want = append(want, pl)
					burst = append(burst, r.fpdu(r.untagged(rdmap.OpSend, 0, true), pl)...)
				}
				before := b.counters()["recv_calls"]
				r.write(burst)
				cqes := b.waitCQEs(b.rcq, k, "burst of Sends")
				for i, c := range cqes {
					if c.Status != proto.WCSuccess || c.WRID != uint64(i) || int(c.ByteLen) != len(want[i]) {
						t.Fatalf("completion %d: %+v, want WRID %d, %d octets", i, c, i, len(want[i]))
					}
					checkBytes(t, fmt.Sprintf("send %d", i), b.mr.Buf[i*256:i*256+len(want[i])], want[i])
				}
				calls := b.counters()["recv_calls"] - before
				t.Logf("%d FPDUs (%d octets) in %d readv calls", k, len(burst), calls)
				// One write of ~6 KiB is one loopback segment: one readv
				// with data and one finding the socket empty, give or
				// take a wake-up; reading FPDU by FPDU took 25 or more.
				if calls > 8 {
					t.Fatalf("recv_calls %d for %d FPDUs in one segment: not batched", calls, k)
				}
				rcRxNoBuffer(t, b)
			})
		}
	}
}

// TestRCRxMixed: small Sends, then RDMA Writes whose payloads are larger
// than the buffer's direct-read bound (rxDirect: read in place), then
// small Sends again, all in one write: the reader switches between
// whole-buffer reads and direct reads with a large payload partly
// buffered, and every octet lands where it belongs; the held last octet of
// each Write is stored.
func TestRCRxMixed(t *testing.T) {
	const (
		small  = 20
		big    = 3
		bigLen = 60000
	)
	for _, tc := range rcRxModes {
		t.Run(tc.name, func(t *testing.T) {
			srv, path := rcServer(t)
			b := newRCEnd(t, srv, path, rcOpts{bufSize: 1 << 20})
			p, _ := rcParams(tc.crc, tc.markers, 4, 4)
			r := connectRaw(t, b, p, false, 0)
			var stream []byte
			wrid := uint64(0)
			sendAt := func(i int) int { return 512*1024 + i*128 }
			var sends [][]byte
			addSends := func() {
				for range small {
					i := len(sends)
					b.postRecv(wrid, b.mr.SGE(sendAt(i), 128))
					wrid++
					pl := rcRxPayload(i, 1+i%100)
					sends = append(sends, pl)
					stream = append(stream, r.fpdu(r.untagged(rdmap.OpSend, 0, true), pl)...)
				}
			}
			addSends()
			want := make([]byte, big*bigLen)
			rcFill(want, 5)
			for j := range big {
				h := tagged(rdmap.OpWrite, b.mr.RKey, b.mr.Addr(j*bigLen), true)
				stream = append(stream, r.fpdu(h, want[j*bigLen:(j+1)*bigLen])...)
			}
			addSends()
			r.write(stream)
			cqes := b.waitCQEs(b.rcq, len(sends), "sends around the writes")
			for i, c := range cqes {
				if c.Status != proto.WCSuccess || c.WRID != uint64(i) || int(c.ByteLen) != len(sends[i]) {
					t.Fatalf("completion %d: %+v", i, c)
				}
				checkBytes(t, fmt.Sprintf("send %d", i), b.mr.Buf[sendAt(i):sendAt(i)+len(sends[i])], sends[i])
			}
			// The Sends behind the Writes completed: the Writes are placed.
			checkBytes(t, "writes", b.mr.Buf[:big*bigLen], want)
			rcRxNoBuffer(t, b)
		})
	}
}

// TestRCRxOctetAtATime: a raw peer writes a few FPDUs (Sends of several
// lengths, an RDMA Write, a zero-length Send) one octet per write, and
// waits after each until the engine has read it, so that every FPDU is cut
// by the end of a read at every octet: length, headers, payload, held last
// octet, PAD, markers and CRC. Each message completes with its octets.
func TestRCRxOctetAtATime(t *testing.T) {
	for _, tc := range rcRxModes {
		t.Run(tc.name, func(t *testing.T) {
			srv, path := rcServer(t)
			b := newRCEnd(t, srv, path, rcOpts{bufSize: 1 << 16})
			p, _ := rcParams(tc.crc, tc.markers, 4, 4)
			r := connectRaw(t, b, p, false, 0)
			wr := rcRxPayload(9, 300)
			var stream []byte
			lens := []int{1, 7, 0, 130}
			for i, n := range lens {
				b.postRecv(uint64(i), b.mr.SGE(4096+i*256, 256))
				stream = append(stream, r.fpdu(r.untagged(rdmap.OpSend, 0, true), rcRxPayload(i, n))...)
				if i == 1 {
					h := tagged(rdmap.OpWrite, b.mr.RKey, b.mr.Addr(0), true)
					stream = append(stream, r.fpdu(h, wr)...)
				}
			}
			var start uint64
			if err := b.engineQP(func(q *rc.QP) error { start = q.RxState().StreamPos; return nil }); err != nil {
				t.Fatal(err)
			}
			for i := range stream {
				r.write(stream[i : i+1])
				rcRxWaitRead(t, b, start+uint64(i+1))
			}
			cqes := b.waitCQEs(b.rcq, len(lens), "sends written octet by octet")
			for i, c := range cqes {
				if c.Status != proto.WCSuccess || c.WRID != uint64(i) || int(c.ByteLen) != lens[i] {
					t.Fatalf("completion %d: %+v", i, c)
				}
				checkBytes(t, fmt.Sprintf("send %d", i), b.mr.Buf[4096+i*256:4096+i*256+lens[i]], rcRxPayload(i, lens[i]))
			}
			checkBytes(t, "write", b.mr.Buf[:len(wr)], wr)
			rcRxNoBuffer(t, b)
		})
	}
}

// rcRxWaitRead waits until the engine has read the stream up to octet pos
// (what mpa.Receiver consumed plus what is buffered).
func rcRxWaitRead(t *testing.T, n *rcEnd, pos uint64) {
	t.Helper()
	deadline := time.Now().Add(rcWait)
	for {
		var got uint64
		err := n.engineQP(func(q *rc.QP) error {
			st := q.RxState()
			got = st.StreamPos + uint64(st.Buffered)
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		if got >= pos {
			if got > pos {
				t.Fatalf("engine read to octet %d, only %d written", got, pos)
			}
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("engine read to octet %d of %d", got, pos)
		}
		time.Sleep(20 * time.Microsecond)
	}
}

// TestRCRxCRCErrorInBurst: a burst of Sends with a bad CRC on the sixth:
// the five before it complete, the engine sends a Terminate for the MPA
// CRC error, and nothing after it is delivered (the receives behind it are
// flushed), with markers on and off.
func TestRCRxCRCErrorInBurst(t *testing.T) {
	const k, bad = 12, 5
	for _, markers := range []bool{false, true} {
		t.Run(fmt.Sprintf("markers=%v", markers), func(t *testing.T) {
			srv, path := rcServer(t)
			b := newRCEnd(t, srv, path, rcOpts{bufSize: 1 << 16})
			p, _ := rcParams(true, markers, 4, 4)
			r := connectRaw(t, b, p, false, 0)
			var burst []byte
			for i := range k {
				b.postRecv(uint64(i), b.mr.SGE(i*256, 256))
				f := r.fpdu(r.untagged(rdmap.OpSend, 0, true), rcRxPayload(i, 40+i))
				if i == bad {
					f[len(f)-1] ^= 0x5a
				}
				burst = append(burst, f...)
			}
			r.write(burst)
			_, term := r.terminate()
			if term.Err != iwerr.MPACRCError {
				t.Fatalf("Terminate %v, want %v", term.Err, iwerr.MPACRCError)
			}
			r.expectEOF()
			r.conn.Close()
			b.waitState(proto.QPStateError)
			cqes := b.waitCQEs(b.rcq, k, "completions and flushes")
			for i, c := range cqes {
				want := proto.WCSuccess
				if i >= bad {
					want = proto.WCWRFlushErr
				}
				if c.WRID != uint64(i) || c.Status != want {
					t.Fatalf("completion %d: %+v, want status %v", i, c, want)
				}
				if want == proto.WCSuccess {
					checkBytes(t, fmt.Sprintf("send %d", i), b.mr.Buf[i*256:i*256+40+i], rcRxPayload(i, 40+i))
				}
			}
			if got := b.counters()["drop_crc"]; got != 1 {
				t.Fatalf("drop_crc %d, want 1", got)
			}
		})
	}
}
