package e2e

import (
	"fmt"
	"testing"

	"github.com/iwarpd/iwarpd/proto"
)

func rcFill(b []byte, seed int) {
	for i := range b {
		b[i] = byte(i*7 + seed*13 + i>>9)
	}
}

// rcPairOf makes two connected RC ends on one server with buffers of size.
func rcPairOf(t *testing.T, size int, crc, markers bool, mss int) (*rcEnd, *rcEnd) {
	srv, path := rcServer(t)
	a := newRCEnd(t, srv, path, rcOpts{bufSize: size})
	b := newRCEnd(t, srv, path, rcOpts{bufSize: size})
	pi, pr := rcParams(crc, markers, 16, 16)
	connectRC(t, a, b, pi, pr, mss)
	if a.state() != proto.QPStateRTS || b.state() != proto.QPStateRTS {
		t.Fatalf("states %v %v after attach", a.state(), b.state())
	}
	return a, b
}

// TestRCSendSizes sends messages of 0 B .. 16 MiB, with CRC on and off,
// markers, and FPDUs of a 1460-octet MSS or of loopback's, and checks
// every octet and the receive completions.
func TestRCSendSizes(t *testing.T) {
	sizes := []int{0, 1, 3, 100, 1447, 1448, 4096, 65536 + 7, 1 << 20, 16 << 20}
	for _, tc := range []struct {
		name         string
		crc, markers bool
		mss          int
	}{
		{"crc", true, false, 0},
		{"nocrc-mss1460", false, false, 1460},
		{"crc-markers-mss1460", true, true, 1460},
		{"markers", false, true, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			const size = 16 << 20
			a, b := rcPairOf(t, 2*size, tc.crc, tc.markers, tc.mss)
			rcFill(a.mr.Buf, 1)
			off := 0
			for i, n := range sizes {
				if tc.markers && n > 1<<20 {
					continue
				}
				b.postRecv(uint64(100+i), b.mr.SGE(off, max(n, 1)))
				flags := proto.SendSignaled
				if i%2 == 1 {
					flags |= proto.SendSolicited
				}
				a.postSend(proto.SQE{WRID: uint64(i), Opcode: proto.WRSend, Flags: flags}, []proto.SGE{a.mr.SGE(off, n)}, nil)
				sc := a.waitCQEs(a.scq, 1, "send")[0]
				rc := b.waitCQEs(b.rcq, 1, "recv")[0]
				if sc.Status != proto.WCSuccess || sc.WRID != uint64(i) || sc.Opcode != proto.WCSend || sc.ByteLen != uint32(n) {
					t.Fatalf("send CQE %+v", sc)
				}
				if rc.Status != proto.WCSuccess || rc.WRID != uint64(100+i) || rc.Opcode != proto.WCRecv || rc.ByteLen != uint32(n) ||
					rc.QPN != b.qpn || (rc.Flags&proto.WCFlagSolicited != 0) != (i%2 == 1) {
					t.Fatalf("recv CQE %+v", rc)
				}
				checkBytes(t, fmt.Sprintf("send of %d", n), b.mr.Buf[off:off+n], a.mr.Buf[off:off+n])
				off += n
				if off+1<<20 > size {
					off = 0
				}
			}
		})
	}
}

// TestRCWrite writes 1 B .. 16 MiB with SGE lists and inline data; the
// target gets no completion, and a following Send's completion implies the
// Write is placed.
func TestRCWrite(t *testing.T) {
	const size = 16 << 20
	a, b := rcPairOf(t, 2*size, true, false, 1460)
	rcFill(a.mr.Buf, 2)
	for i, n := range []int{1, 2, 1000, 1447, 65536 + 3, 1 << 20, size} {
		clear(b.mr.Buf[:size])
		// Three SGEs when big enough.
		var sges []proto.SGE
		if n >= 3 {
			k := n / 3
			sges = []proto.SGE{a.mr.SGE(0, k), a.mr.SGE(size, k), a.mr.SGE(2*k, n-2*k)}
		} else {
			sges = []proto.SGE{a.mr.SGE(0, n)}
		}
		want := make([]byte, 0, n)
		for _, s := range sges {
			off := int(s.Addr - a.mr.Addr(0))
			want = append(want, a.mr.Buf[off:off+int(s.Length)]...)
		}
		a.postSend(proto.SQE{WRID: uint64(i), Opcode: proto.WRRDMAWrite, Flags: proto.SendSignaled, RKey: b.mr.RKey,
			RemoteAddr: b.mr.Addr(7)}, sges, nil)
		// A zero-length Send behind it: its receive completion comes after the placement.
		b.postRecv(1000, b.mr.SGE(size, 1))
		a.postSend(proto.SQE{WRID: 99, Opcode: proto.WRSend}, nil, nil)
		c := a.waitCQEs(a.scq, 1, "write")[0]
		if c.Status != proto.WCSuccess || c.Opcode != proto.WCRDMAWrite || c.ByteLen != uint32(n) || c.WRID != uint64(i) {
			t.Fatalf("write CQE %+v", c)
		}
		r := b.waitCQEs(b.rcq, 1, "recv after write")[0]
		if r.WRID != 1000 || r.ByteLen != 0 {
			t.Fatalf("recv CQE %+v (a Write must not consume a receive)", r)
		}
		checkBytes(t, fmt.Sprintf("write of %d", n), b.mr.Buf[7:7+n], want)
		if b.mr.Buf[7+n] != 0 || b.mr.Buf[6] != 0 {
			t.Fatalf("write of %d spilled", n)
		}
	}
	// Inline Write and inline Send.
	in := []byte("inline payload, copied out of the SQE")
	a.postSend(proto.SQE{WRID: 50, Opcode: proto.WRRDMAWrite, Flags: proto.SendSignaled, RKey: b.mr.RKey, RemoteAddr: b.mr.Addr(100)}, nil, in)
	b.postRecv(51, b.mr.SGE(200, 10), b.mr.SGE(300, 100))
	a.postSend(proto.SQE{WRID: 52, Opcode: proto.WRSend, Flags: proto.SendSignaled}, nil, in)
	cs := a.waitCQEs(a.scq, 2, "inline")
	if cs[0].WRID != 50 || cs[1].WRID != 52 || cs[1].ByteLen != uint32(len(in)) {
		t.Fatalf("inline CQEs %+v", cs)
	}
	r := b.waitCQEs(b.rcq, 1, "inline recv")[0]
	if r.ByteLen != uint32(len(in)) {
		t.Fatalf("inline recv %+v", r)
	}
	checkBytes(t, "inline write", b.mr.Buf[100:100+len(in)], in)
	checkBytes(t, "inline send (SGE list)", append(append([]byte(nil), b.mr.Buf[200:210]...), b.mr.Buf[300:300+len(in)-10]...), in)
}

// TestRCRead reads with ORD 4 and 12 Reads posted at once: at most 4 are
// outstanding, responses come back in order, completions are in order and
// interleaved Sends complete after the Reads posted before them.
func TestRCRead(t *testing.T) {
	const size = 4 << 20
	srv, path := rcServer(t)
	a := newRCEnd(t, srv, path, rcOpts{bufSize: 2 * size})
	b := newRCEnd(t, srv, path, rcOpts{bufSize: 2 * size})
	pi, pr := rcParams(true, false, 4, 4)
	connectRC(t, a, b, pi, pr, 1460)
	rcFill(b.mr.Buf, 3)
	sizes := []int{1, 0, 4096, 1 << 20, 77, size, 1448, 9000, 1, 2, 3, 65536}
	off := 0
	type rd struct{ dst, src, n int }
	var reads []rd
	for i, n := range sizes {
		src := (i * 4099) % (size / 2)
		reads = append(reads, rd{off, src, n})
		var sges []proto.SGE
		if n > 0 {
			sges = []proto.SGE{a.mr.SGE(off, n)}
		}
		a.postSend(proto.SQE{WRID: uint64(i), Opcode: proto.WRRDMARead, Flags: proto.SendSignaled, RKey: b.mr.RKey,
			RemoteAddr: b.mr.Addr(src)}, sges, nil)
		off = (off + n) % size
		if i == 5 {
			b.postRecv(500, b.mr.SGE(2*size-16, 16))
			a.postSend(proto.SQE{WRID: 500, Opcode: proto.WRSend, Flags: proto.SendSignaled}, []proto.SGE{a.mr.SGE(2*size-16, 16)}, nil)
		}
	}
	cs := a.waitCQEs(a.scq, len(sizes)+1, "reads")
	k := 0
	for i, c := range cs {
		if i == 6 {
			if c.WRID != 500 || c.Opcode != proto.WCSend {
				t.Fatalf("completion %d: %+v, want the Send", i, c)
			}
			continue
		}
		r := reads[k]
		if c.Status != proto.WCSuccess || c.WRID != uint64(k) || c.Opcode != proto.WCRDMARead || c.ByteLen != uint32(r.n) {
			t.Fatalf("completion %d: %+v, want read %d", i, c, k)
		}
		k++
	}
	// Later reads may overwrite earlier sinks; check the last of each area.
	for i := len(reads) - 1; i >= 0; i-- {
		r := reads[i]
		overwritten := false
		for _, l := range reads[i+1:] {
			if l.dst < r.dst+r.n && r.dst < l.dst+l.n {
				overwritten = true
			}
		}
		if !overwritten {
			checkBytes(t, fmt.Sprintf("read %d of %d", i, r.n), a.mr.Buf[r.dst:r.dst+r.n], b.mr.Buf[r.src:r.src+r.n])
		}
	}
	b.waitCQEs(b.rcq, 1, "send between reads")
	// The responder posted nothing for the Reads.
	b.noCQE(b.scq, "responder")
}
