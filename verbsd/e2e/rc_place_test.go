package e2e

import (
	"math"
	"sync/atomic"
	"testing"
	"time"
	"unsafe"

	"github.com/iwarpd/iwarpd/ddp"
	"github.com/iwarpd/iwarpd/mpa"
	"github.com/iwarpd/iwarpd/proto"
	"github.com/iwarpd/iwarpd/rdmap"
	"github.com/iwarpd/iwarpd/verbsd/rc"
)

// TestRCLastByteLast polls the last octet of RDMA Writes (and Read
// Responses) like an MPI fast path: when it shows the new value, every
// other octet of the message must already be there.
func TestRCLastByteLast(t *testing.T) {
	const n = 1<<20 + 3 // ends inside a word: the poll loads that word
	a, b := rcPairOf(t, 4<<20, true, false, 1460)
	for round := 1; round <= 8; round++ {
		src := a.mr.Buf[:n]
		for i := range src {
			src[i] = byte(round)
		}
		last := n - 1
		word := (*atomic.Uint32)(unsafe.Pointer(&b.mr.Buf[last&^3]))
		shift := uint(last&3) * 8
		seen := make(chan []int, 1)
		go func() {
			deadline := time.Now().Add(rcWait)
			for byte(word.Load()>>shift) != byte(round) {
				if time.Now().After(deadline) {
					seen <- nil
					return
				}
			}
			var bad []int
			for i := 0; i < last; i += 997 {
				if (*atomic.Uint32)(unsafe.Pointer(&b.mr.Buf[i&^3])).Load()>>(uint(i&3)*8)&0xff != uint32(round) {
					bad = append(bad, i)
				}
			}
			seen <- bad
		}()
		if round%2 == 1 {
			a.postSend(proto.SQE{WRID: uint64(round), Opcode: proto.WRRDMAWrite, RKey: b.mr.RKey, RemoteAddr: b.mr.Addr(0)},
				[]proto.SGE{a.mr.SGE(0, n)}, nil)
		} else {
			// b reads a's buffer into its own.
			b.postSend(proto.SQE{WRID: uint64(round), Opcode: proto.WRRDMARead, RKey: a.mr.RKey, RemoteAddr: a.mr.Addr(0)},
				[]proto.SGE{b.mr.SGE(0, n)}, nil)
		}
		bad := <-seen
		if bad == nil && byte(word.Load()>>shift) != byte(round) {
			t.Fatalf("round %d: last octet never arrived", round)
		}
		if len(bad) > 0 {
			t.Fatalf("round %d: last octet visible before octets %v", round, bad[:min(len(bad), 5)])
		}
	}
}

// TestRCMaxMessageArithmetic: a 2^31-octet message is cut into FPDUs of
// MULPDU whose MO/TO cover it exactly, and a longer SGE list is refused.
func TestRCMaxMessageArithmetic(t *testing.T) {
	mulpdu := mpa.MULPDU(1460, false)
	for _, tagged := range []bool{false, true} {
		max := ddp.MaxPayload(mulpdu, tagged, 0)
		var s ddp.Segmenter
		if tagged {
			s, _ = ddp.TaggedSegments(uint8(rdmap.MakeControl(rdmap.OpWrite)), 5, math.MaxUint64-rc.MaxMessage+1, rc.MaxMessage, max)
		} else {
			s, _ = ddp.UntaggedSegments(uint8(rdmap.MakeControl(rdmap.OpSend)), 0, 0, 1, rc.MaxMessage, max)
		}
		want := uint32((rc.MaxMessage + max - 1) / max)
		if s.Count() != want {
			t.Fatalf("tagged %v: %d segments, want %d", tagged, s.Count(), want)
		}
		last := s.Segment(s.Count() - 1)
		if !last.Header.Last || uint64(last.Offset)+uint64(last.Len) != rc.MaxMessage || s.Segment(0).Header.Last {
			t.Fatalf("tagged %v: last segment %+v", tagged, last)
		}
		if tagged && last.Header.TO+uint64(last.Len)-1 != math.MaxUint64 {
			t.Fatalf("last TO %#x", last.Header.TO)
		}
		h := ddp.Header{Tagged: tagged}
		if mpa.FPDULen(h.Len()+max) > 1460 || mpa.FPDULen(h.Len()+max+1) <= 1460-4 {
			t.Fatalf("an FPDU exceeds the MSS")
		}
	}
	// A Send whose SGEs add up to more than 2^31 fails with a length error.
	srv, path := rcServer(t)
	a := newRCEnd(t, srv, path, rcOpts{bufSize: 1 << 20})
	b := newRCEnd(t, srv, path, rcOpts{bufSize: 1 << 20})
	pi, pr := rcParams(false, false, 4, 4)
	connectRC(t, a, b, pi, pr, 0)
	big := a.mr.SGE(0, 1<<20)
	var sges []proto.SGE
	for range 4 {
		sges = append(sges, big)
	}
	q := proto.SQE{Opcode: proto.WRSend}
	err := a.engineQP(func(x *rc.QP) error {
		x.Conn.Tx.Sges = x.Conn.Tx.Sges[:0]
		slot := make([]byte, proto.SQEHeaderLen+len(sges)*proto.SGELen)
		for i, s := range sges {
			s.Length = 1 << 30 // a client lying in its own SQE: the MR check stops it first
			s.Put(slot[proto.SQEHeaderLen+i*proto.SGELen:])
		}
		q.NumSGE = uint16(len(sges))
		if st := x.Engine.RcCopyPayload(x, &q, slot, false); st != proto.WCLocProtErr {
			t.Errorf("SGEs beyond the MR: %v", st)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// FuzzRCReceive feeds arbitrary octets, as the peer's side of the stream,
// to a connected RC QP: the engine must never panic or hang, and must end
// the connection or stay usable.
func FuzzRCReceive(f *testing.F) {
	p, _ := rcParams(true, false, 4, 4)
	seed := func(h ddp.Header, payload []byte) []byte {
		return mpa.NewSender(true, false).AppendFPDU(nil, append(h.Append(nil), payload...))
	}
	f.Add(seed(ddp.Header{Version: 1, ULPControl: uint8(rdmap.MakeControl(rdmap.OpSend)), MSN: 1, Last: true}, []byte("hello")))
	f.Add(seed(ddp.Header{Tagged: true, Version: 1, ULPControl: uint8(rdmap.MakeControl(rdmap.OpWrite)), Stag: 1, Last: true}, nil))
	f.Add(seed(ddp.Header{Version: 1, ULPControl: uint8(rdmap.MakeControl(rdmap.OpReadRequest)), QN: 1, MSN: 1, Last: true},
		(&rdmap.ReadRequest{SinkStag: 1, Size: 0, SourceStag: 1}).Append(nil)))
	f.Add(seed(ddp.Header{Version: 1, ULPControl: uint8(rdmap.MakeControl(rdmap.OpTerminate)), QN: 2, MSN: 1, Last: true}, []byte{0x12, 1, 0, 0}))
	f.Add([]byte{0xff, 0xff, 1, 2, 3})
	srv, path := rcServer(f)
	f.Fuzz(func(t *testing.T, b []byte) {
		n := newRCEnd(t, srv, path, rcOpts{bufSize: 4096})
		n.postRecv(1, n.mr.SGE(0, 4096))
		r := connectRaw(t, n, p, false, 0)
		r.conn.SetWriteDeadline(time.Now().Add(time.Second))
		r.conn.Write(b)
		r.conn.CloseWrite()
		// The engine reaches ERROR (the stream ends: FIN or Terminate).
		deadline := time.Now().Add(5 * time.Second)
		for n.state() != proto.QPStateError {
			if time.Now().After(deadline) {
				t.Fatalf("QP in %v after the peer's stream ended", n.state())
			}
			time.Sleep(time.Millisecond)
		}
		n.c.Call(proto.OpDestroyQP, proto.Handle{Handle: n.qp}, nil)
	})
}
