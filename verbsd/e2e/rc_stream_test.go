package e2e

import (
	"fmt"
	"testing"
	"time"

	"github.com/iwarpd/iwarpd/proto"
	"github.com/iwarpd/iwarpd/verbsd/rc"
	"golang.org/x/sys/unix"
)

// TestRCStream streams windows of 1 MiB RDMA Writes and Reads back to back
// (16 outstanding, as iwarp-perf's bandwidth test keeps them) with CRC and
// markers on and off over loopback's 64 KiB FPDUs: the socket fills, the
// sender resumes cut FPDUs, the receiver's raw readv lands payloads in
// registered memory across many FPDUs per pass. Every octet is checked,
// and completions come in posting order.
func TestRCStream(t *testing.T) {
	const (
		msg    = 1 << 20
		window = 16
		rounds = 2
	)
	for _, tc := range []struct {
		name         string
		crc, markers bool
	}{
		{"crc", true, false},
		{"nocrc", false, false},
		{"crc-markers", true, true},
		{"markers", false, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a, b := rcPairOf(t, window*msg, tc.crc, tc.markers, 0)
			for r := range rounds {
				rcFill(a.mr.Buf, 10+r)
				clear(b.mr.Buf)
				for i := range window {
					a.postSend(proto.SQE{WRID: uint64(i), Opcode: proto.WRRDMAWrite, Flags: proto.SendSignaled,
						RKey: b.mr.RKey, RemoteAddr: b.mr.Addr(i * msg)}, []proto.SGE{a.mr.SGE(i*msg, msg)}, nil)
				}
				// A Send behind the Writes: its receive completes after they are placed.
				b.postRecv(500, b.mr.SGE(0, 1))
				a.postSend(proto.SQE{WRID: 999, Opcode: proto.WRSend}, nil, nil)
				for i, c := range a.waitCQEs(a.scq, window, "writes") {
					if c.Status != proto.WCSuccess || c.WRID != uint64(i) || c.ByteLen != msg {
						t.Fatalf("round %d: write CQE %d: %+v", r, i, c)
					}
				}
				if c := b.waitCQEs(b.rcq, 1, "send after writes")[0]; c.WRID != 500 || c.Status != proto.WCSuccess {
					t.Fatalf("round %d: recv CQE %+v", r, c)
				}
				checkBytes(t, fmt.Sprintf("round %d: writes", r), b.mr.Buf, a.mr.Buf)
			}
			// Reads the other way: a pulls b's memory (ORD 16, rcParams).
			rcFill(b.mr.Buf, 42)
			clear(a.mr.Buf)
			for i := range window {
				a.postSend(proto.SQE{WRID: uint64(100 + i), Opcode: proto.WRRDMARead, Flags: proto.SendSignaled,
					RKey: b.mr.RKey, RemoteAddr: b.mr.Addr(i * msg)}, []proto.SGE{a.mr.SGE(i*msg, msg)}, nil)
			}
			for i, c := range a.waitCQEs(a.scq, window, "reads") {
				if c.Status != proto.WCSuccess || c.WRID != uint64(100+i) || c.ByteLen != msg || c.Opcode != proto.WCRDMARead {
					t.Fatalf("read CQE %d: %+v", i, c)
				}
			}
			checkBytes(t, "reads", a.mr.Buf, b.mr.Buf)
			if got := a.counters()["bytes_out"]; got < rounds*window*msg {
				t.Fatalf("bytes_out %d, want at least %d", got, rounds*window*msg)
			}
		})
	}
}

// TestRCSendWaitsForRoom: once a write finds the socket full, the engine
// waits for epoll to report room before it writes (and checksums) the cut
// FPDU again, instead of retrying in every pass of its poll window. With
// a peer that reads nothing, the short writes counted (send_blocked) stay
// at one per EPOLLOUT the kernel reports, a handful; retrying every pass
// counted dozens per poll window. Then the peer drains the stream, which
// must carry every Write intact.
func TestRCSendWaitsForRoom(t *testing.T) {
	const (
		msg = 1 << 20
		n   = 8
	)
	srv, path := rcServer(t)
	a := newRCEnd(t, srv, path, rcOpts{bufSize: msg})
	p, _ := rcParams(true, false, 4, 4)
	r := connectRaw(t, a, p, true, 0)
	if err := a.engineQP(func(q *rc.QP) error {
		return unix.SetsockoptInt(q.Conn.Fd, unix.SOL_SOCKET, unix.SO_SNDBUF, 128<<10)
	}); err != nil {
		t.Fatal(err)
	}
	rcFill(a.mr.Buf, 5)
	for i := range n {
		a.postSend(proto.SQE{WRID: uint64(i), Opcode: proto.WRRDMAWrite, Flags: proto.SendSignaled, RKey: 5,
			RemoteAddr: uint64(i) * msg}, []proto.SGE{a.mr.SGE(0, msg)}, nil)
	}
	deadline := time.Now().Add(rcWait)
	for i := 0; a.counters()["send_blocked"] == 0; i++ {
		if i > 10000 || time.Now().After(deadline) {
			t.Fatal("the engine never found the socket full")
		}
		time.Sleep(time.Millisecond)
	}
	time.Sleep(100 * time.Millisecond) // many poll windows (200 µs each) of a blocked sender
	got := a.counters()["send_blocked"]
	t.Logf("send_blocked %d", got)
	if got > 4 {
		t.Fatalf("send_blocked %d while the peer read nothing: the engine retried without EPOLLOUT", got)
	}
	// Drain: every Write arrives whole, in order.
	var off uint64
	for msgs := 0; msgs < n; {
		h, payload, err := r.next()
		if err != nil {
			t.Fatalf("raw peer after %d Writes: %v", msgs, err)
		}
		if !h.Tagged || h.TO != off {
			t.Fatalf("segment %+v at offset %d", h, off)
		}
		checkBytes(t, fmt.Sprintf("Write %d at %d", msgs, off%msg), payload, a.mr.Buf[off%msg:off%msg+uint64(len(payload))])
		off += uint64(len(payload))
		if h.Last {
			msgs++
			if off != uint64(msgs)*msg {
				t.Fatalf("Write %d ended at %d", msgs-1, off)
			}
		}
	}
	cqes := a.waitCQEs(a.scq, n, "writes after draining")
	if cqes[n-1].WRID != n-1 || cqes[n-1].Status != proto.WCSuccess {
		t.Fatalf("last completion %+v", cqes[n-1])
	}
}
