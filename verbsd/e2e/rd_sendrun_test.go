package e2e

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"sync"
	"testing"
	"unsafe"

	"github.com/iwarpd/iwarpd/ddp"
	"github.com/iwarpd/iwarpd/internal/crc32c"
	"github.com/iwarpd/iwarpd/llp/dgram"
	"github.com/iwarpd/iwarpd/proto"
	"github.com/iwarpd/iwarpd/rdmap"
	"github.com/iwarpd/iwarpd/verbsd"
	"github.com/iwarpd/iwarpd/verbsd/config"
	"github.com/iwarpd/iwarpd/verbsd/rd"
	"github.com/iwarpd/iwarpd/verbsd/ud"
	"github.com/iwarpd/iwarpd/verbsd/verbsdtest"
	"golang.org/x/sys/unix"
)

// wireTap records every datagram the engines send (a GSO message cut
// into its datagrams as the kernel cuts it) while on.
type wireTap struct {
	mu  sync.Mutex
	on  bool
	got [][]byte
}

func (w *wireTap) install(srv *verbsd.Server) {
	setSendmmsg(srv, func(fd int, msgs []unix.Mmsghdr) (int, error) { // engines_internal_test.go
		w.mu.Lock()
		if w.on {
			for i := range msgs {
				w.record(&msgs[i].Hdr)
			}
		}
		w.mu.Unlock()
		return ud.SysSendmmsg(fd, msgs)
	})
}

// record cuts the UDP payload of h into datagrams (UDP_SEGMENT size, or
// one) and keeps copies.
func (w *wireTap) record(h *unix.Msghdr) {
	var all []byte
	iovs := unsafe.Slice(h.Iov, h.Iovlen)
	for _, v := range iovs {
		all = append(all, unsafe.Slice(v.Base, v.Len)...)
	}
	seg := len(all)
	if h.Controllen > 0 {
		cm := unsafe.Slice(h.Control, h.Controllen)
		seg = int(binary.NativeEndian.Uint16(cm[unix.SizeofCmsghdr:]))
	}
	for len(all) > 0 {
		k := min(seg, len(all))
		w.got = append(w.got, all[:k:k])
		all = all[k:]
	}
}

// take returns the datagrams recorded since the last take and starts
// recording (again).
func (w *wireTap) take() [][]byte {
	w.mu.Lock()
	defer w.mu.Unlock()
	g := w.got
	w.got, w.on = nil, true
	return g
}

// setRuns turns the send fast lane of every engine of srv on or off.
func setRuns(srv *verbsd.Server, on bool) {
	srv.Device().Engs[0].Do(func() error {
		for _, e := range srv.Device().Engs {
			rd.SetSendRuns(e, on)
		}
		return nil
	})
}

// wireMsg is one message a case sends, as the reference encoders frame
// it: its segments, the RDMAP header each carries, its source octets.
type wireMsg struct {
	tagged bool
	segs   ddp.Segmenter
	ulp    func(off uint32) []byte // the RDMAP header of the segment at off
	src    []byte
	noCRC  bool
	wrec   bool // a Write-Record
}

// check finds the datagrams of m among got (DATA, its DDP header's STag
// or QN and MSN), checks each octet for octet against the datagram the
// encoders build for its segment with its RD header, checks that every
// segment went and that their first transmissions have consecutive
// sequence numbers; it returns them in order of first transmission, each
// with the RD Sequence Number, CumAck, SACK, ACKREQ, CRC and MSN (or
// Record ID) zeroed: what the history of the QP sets, not the segment.
func (m *wireMsg) check(t *testing.T, what string, got [][]byte) [][]byte {
	t.Helper()
	s0 := m.segs.Segment(0)
	seen := map[uint32]bool{}
	var norm [][]byte
	var lastSeq uint32
	for _, d := range got {
		if len(d) < dgram.KeyHeaderLen+dgram.RDHeaderLen+ddp.TaggedHeaderLen+crc32c.Size {
			continue
		}
		keys, _ := dgram.ParseKeys(d)
		rh, _, err := dgram.ParseRDHeader(d[dgram.KeyHeaderLen:])
		if err != nil || rh.Type != dgram.RDData {
			continue
		}
		dh, _, err := ddp.Parse(d[dgram.KeyHeaderLen+dgram.RDHeaderLen:])
		if err != nil || dh.Tagged != m.tagged || dh.ULPControl != s0.Header.ULPControl ||
			(m.tagged && dh.Stag != s0.Header.Stag) || (!m.tagged && (dh.QN != s0.Header.QN || dh.MSN != s0.Header.MSN)) {
			continue
		}
		var off uint32
		if m.tagged {
			off = uint32(dh.TO - s0.Header.TO)
		} else {
			off = dh.MO
		}
		i := off / uint32(max(s0.Len, 1))
		s := m.segs.Segment(i)
		want := keys.Append(nil)
		want = rh.Append(want)
		want = s.Header.Append(want)
		want = append(want, m.ulp(s.Offset)...)
		want = append(want, m.src[s.Offset:int(s.Offset)+s.Len]...)
		var c uint32
		if !m.noCRC {
			c = crc32c.Checksum(want)
		}
		want = binary.LittleEndian.AppendUint32(want, c)
		if !bytes.Equal(d, want) || keys.QKey != verbsdtest.TestQKey {
			t.Fatalf("%s: segment %d (MO/TO +%d):\n got % x\nwant % x", what, i, off, head(d), head(want))
		}
		if seen[i] {
			continue // a retransmission: checked, not counted
		}
		if len(seen) > 0 && rh.Seq != lastSeq+1 {
			t.Fatalf("%s: segment %d has Seq %d after %d", what, i, rh.Seq, lastSeq)
		}
		seen[i], lastSeq = true, rh.Seq
		if m.wrec && s.Header.Last && rh.Flags&dgram.FlagAckReq == 0 {
			// Nothing queued behind it: its last datagram asks for the ACK.
			t.Fatalf("%s: the last datagram of a Write-Record without ACKREQ: %+v", what, rh)
		}
		n := bytes.Clone(d)
		off2 := dgram.KeyHeaderLen
		n[off2+1] &^= byte(dgram.FlagAckReq)
		clear(n[off2+12 : off2+24]) // Seq, CumAck, SACK
		clear(n[len(n)-crc32c.Size:])
		if d := off2 + dgram.RDHeaderLen; m.tagged && m.wrec {
			clear(n[d+ddp.TaggedHeaderLen : d+ddp.TaggedHeaderLen+4]) // Record ID (the MSN)
		} else if !m.tagged {
			clear(n[d+10 : d+14]) // MSN
		}
		norm = append(norm, n)
	}
	if len(seen) != int(m.segs.Count()) {
		t.Fatalf("%s: %d of %d segments seen among %d datagrams", what, len(seen), m.segs.Count(), len(got))
	}
	return norm
}

// newDgramNodeOpts is newDgramNode with the QP's options.
func newDgramNodeOpts(t testing.TB, path string, size int, access proto.Access, o verbsdtest.QPOptions) *dgramNode {
	t.Helper()
	c, err := verbsdtest.Dial(path, false)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	n := &dgramNode{c: c}
	check := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	n.pd, err = c.AllocPD()
	check(err)
	n.mr, err = c.RegMR(n.pd, size, proto.AccessLocalWrite|access)
	check(err)
	n.scq, err = c.CreateCQ(4096, 0)
	check(err)
	n.rcq, err = c.CreateCQ(4096, 0)
	check(err)
	caps := proto.QPCaps{MaxSendWR: 1024, MaxRecvWR: 1024, MaxSendSGE: 4, MaxRecvSGE: 4, MaxInline: 64}
	n.qp, err = c.CreateQP(n.pd, n.scq, n.rcq, caps, o)
	check(err)
	check(n.qp.ToRTS())
	return n
}

// head is the headers of datagram d and a little payload.
func head(d []byte) []byte { return d[:min(len(d), 96)] }

// TestRDSendRunsWire: the datagrams the send fast lane builds equal, octet
// for octet, the ones the encoders build for the same segments (the
// per-datagram path's), and — the fields that depend on the QP's history
// (sequence numbers, piggybacked acks, ACKREQ, hence the CRC) left aside —
// the ones the per-datagram path sent for the same message on the same
// QPs: Sends (one and three SGEs), Sends with Immediate, Write-Records
// with and without Immediate, Read Responses; sizes around the segment
// boundaries and beyond the window; source offsets; CRC on and off; GSO
// on and off.
func TestRDSendRunsWire(t *testing.T) {
	for _, gso := range []bool{true, false} {
		for _, noCRC := range []bool{false, true} {
			t.Run(fmt.Sprintf("gso=%v,crc=%v", gso, !noCRC), func(t *testing.T) {
				testRDSendRunsWire(t, gso, noCRC)
			})
		}
	}
}

func testRDSendRunsWire(t *testing.T, gso, noCRC bool) {
	var cfg config.Config
	srv, path := startRD(t, func(c *config.Config) { c.GSO = gso; cfg = *c })
	tap := &wireTap{}
	tap.install(srv)
	opts := verbsdtest.QPOptions{Type: proto.QPTypeRD, NoCRC: noCRC}
	a := newDgramNodeOpts(t, path, 4<<20, proto.AccessRemoteWrite|proto.AccessRemoteRead, opts)
	b := newDgramNodeOpts(t, path, 4<<20, proto.AccessRemoteWrite|proto.AccessRemoteRead, opts)
	ah := a.ah(t, b)
	// Both ways proven and acknowledged first, so that every case meets
	// the same piggybacked-ack state (FlagAck, Echoed Incarnation).
	rdExchange(t, a, b, []int{10})
	rdExchange(t, b, a, []int{10})
	seg := ddp.MaxPayload(dgram.MaxSegment(cfg.DatagramSize, true), false, 0)
	sizes := []int{2*seg - 1, 2 * seg, 2*seg + 1, 10*seg + 7, 65536, 300*seg + 5}
	offs := []int{0, 3, 4093}
	msn := uint32(1) // a's Send/Write-Record MSN (rdExchange sent one)
	for si, size := range sizes {
		for oi, off := range offs {
			for _, op := range []string{"send", "send3", "imm", "wrec", "wrecimm", "read"} {
				name := fmt.Sprintf("%s %d B at +%d", op, size, off)
				seed := si*31 + oi*7 + len(op)
				var norms [2][][]byte
				for pass, runs := range []bool{false, true} {
					setRuns(srv, runs)
					src := a.mr.Buf[off : off+size]
					pattern(src, seed)
					pattern(b.mr.Buf[off:off+size], seed+1)
					tap.take()
					m := wireMsg{src: src, noCRC: noCRC, ulp: func(uint32) []byte { return nil }}
					sqe := proto.SQE{WRID: uint64(pass), Flags: proto.SendSignaled, AH: ah}
					sges := []proto.SGE{a.mr.SGE(off, size)}
					var rcvd bool
					switch op {
					case "send", "send3", "imm":
						sqe.Opcode = proto.WRSend
						ctl := rdmap.OpSend
						if op == "imm" {
							sqe.Opcode, sqe.Imm, ctl = proto.WRSendWithImm, 0xC0FFEE, rdmap.OpImmediateData
							imm := rdmap.MakeImmediateData(0xC0FFEE).Raw
							m.ulp = func(uint32) []byte { return imm[:] }
						}
						if op == "send3" {
							x, y := size/3, size/3+seg/2
							sges = []proto.SGE{a.mr.SGE(off, x), a.mr.SGE(off+x, y-x), a.mr.SGE(off+y, size-y)}
						}
						msn++
						hl := len(m.ulp(0))
						m.segs, _ = ddp.UntaggedSegments(uint8(rdmap.MakeControl(ctl)), 0, rdmap.QNSend, msn, uint32(size),
							ddp.MaxPayload(dgram.MaxSegment(cfg.DatagramSize, true), false, hl))
						b.recv(t, 7, 0, 4<<20)
						rcvd = true
					case "wrec", "wrecimm":
						sqe.Opcode, sqe.RKey, sqe.RemoteAddr = proto.WRWriteRecord, b.mr.RKey, b.mr.Addr(off)
						ctl := rdmap.OpWriteRecord
						if op == "wrecimm" {
							sqe.Opcode, sqe.Imm, ctl = proto.WRWriteRecordWithImm, 0xBEEF, rdmap.OpWriteRecordImm
						}
						msn++
						rec := rdmap.WriteRecord{RecordID: msn, MessageLength: uint32(size)}
						imm := rdmap.MakeImmediateData(0xBEEF).Raw
						withImm := op == "wrecimm"
						m.ulp = func(o uint32) []byte {
							r := rec
							r.MessageOffset = o
							h := r.Append(nil)
							if withImm {
								h = append(h, imm[:]...)
							}
							return h
						}
						m.tagged, m.wrec = true, true
						m.segs, _ = ddp.TaggedSegments(uint8(rdmap.MakeControl(ctl)), b.mr.RKey, b.mr.Addr(off), uint32(size),
							ddp.MaxPayload(dgram.MaxSegment(cfg.DatagramSize, true), true, len(m.ulp(0))))
						b.recv(t, 7, 0, 4096)
						rcvd = true
					case "read":
						sqe.Opcode, sqe.RKey, sqe.RemoteAddr = proto.WRRDMARead, b.mr.RKey, b.mr.Addr(off)
						m.src, m.tagged = b.mr.Buf[off:off+size], true
						m.segs, _ = ddp.TaggedSegments(uint8(rdmap.MakeControl(rdmap.OpReadResponse)), a.mr.LKey, a.mr.Addr(off), uint32(size),
							ddp.MaxPayload(dgram.MaxSegment(cfg.DatagramSize, true), true, 0))
					}
					a.post(t, sqe, sges)
					if sc := waitN(t, a.scq, 1, name)[0]; sc.Status != proto.WCSuccess {
						t.Fatalf("%s: send completion %+v", name, sc)
					}
					if rcvd {
						if rc := waitN(t, b.rcq, 1, name)[0]; rc.Status != proto.WCSuccess {
							t.Fatalf("%s: receive completion %+v", name, rc)
						}
					}
					norms[pass] = m.check(t, fmt.Sprintf("%s, runs %v", name, runs), tap.take())
				}
				if len(norms[0]) != len(norms[1]) {
					t.Fatalf("%s: %d datagrams, per-datagram path %d", name, len(norms[1]), len(norms[0]))
				}
				for i := range norms[0] {
					if !bytes.Equal(norms[0][i], norms[1][i]) {
						t.Fatalf("%s: datagram %d:\n runs % x\n each % x", name, i, head(norms[1][i]), head(norms[0][i]))
					}
				}
			}
		}
	}
	if c := rdCounters(t, path, a.qp.QPN); c["wr_errors"] != 0 {
		t.Fatalf("sender counters %v", c)
	}
}

// processCPU is the CPU time of the test process so far, ns (user and
// system, all threads: the daemon's engines and the client).
func processCPU(b *testing.B) int64 {
	var ru unix.Rusage
	if err := unix.Getrusage(unix.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return ru.Utime.Nano() + ru.Stime.Nano()
}

// BenchmarkRDRunsRead1MiB: 1 MiB RDMA Reads between two QPs of one
// in-process daemon over loopback (1472-octet datagrams: 738 Read
// Response datagrams each), with the responder's send fast lane on and
// off: wall and CPU ns per datagram of the whole transfer (both engines,
// the kernel's UDP on both sides, the client) and the allocations per
// Read of the whole process.
func BenchmarkRDRunsRead1MiB(b *testing.B) {
	const size = 1 << 20
	readPayload := ddp.MaxPayload(dgram.MaxSegment(dgram.DefaultDatagramSize, true), true, 0)
	for _, runs := range []bool{false, true} {
		b.Run(fmt.Sprintf("runs=%v", runs), func(b *testing.B) {
			srv, path := serve(b, true)
			setRuns(srv, runs)
			opts := verbsdtest.QPOptions{Type: proto.QPTypeRD}
			x := newDgramNodeOpts(b, path, size, proto.AccessRemoteRead, opts)
			y := newDgramNodeOpts(b, path, size, proto.AccessRemoteRead, opts)
			ah, err := x.c.CreateAH(x.pd, y.qp.Addr)
			if err != nil {
				b.Fatal(err)
			}
			read := func() {
				sqe := proto.SQE{Opcode: proto.WRRDMARead, Flags: proto.SendSignaled, AH: ah, RKey: y.mr.RKey, RemoteAddr: y.mr.Addr(0)}
				if err := x.qp.PostSend(sqe, []proto.SGE{x.mr.SGE(0, size)}, nil); err != nil {
					b.Fatal(err)
				}
				if c := waitCQEsWithin(b, x.scq, 1, "read", rdWait()); c[0].Status != proto.WCSuccess {
					b.Fatalf("read: %+v", c[0])
				}
			}
			read() // peers proven, buffers touched
			b.ReportAllocs()
			cpu0 := processCPU(b)
			b.ResetTimer()
			for range b.N {
				read()
			}
			b.StopTimer()
			dg := float64(b.N) * float64((size+readPayload-1)/readPayload)
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/dg, "ns/datagram")
			b.ReportMetric(float64(processCPU(b)-cpu0)/dg, "cpu-ns/datagram")
		})
	}
}

// TestRDSendRunLossInTheMiddle: the first transmissions of datagrams in
// the middle of a run (and one near its end) are lost; each of them is
// sent again, alone, and the message arrives whole. (Exactly those and no
// other is llp/rd TestSendRunLossInTheMiddle's deterministic check; here a
// loaded machine may add a spurious timeout, which is logged.)
func TestRDSendRunLossInTheMiddle(t *testing.T) {
	srv, path := startRD(t, func(c *config.Config) { c.GSO = false })
	a := newRDNode(t, path, 1<<20, 0)
	b := newRDNode(t, path, 1<<20, 0)
	rdExchange(t, a, b, []int{10}) // MSN 1; the next Send is MSN 2
	const size = 100 * 1400
	drop := map[uint32]bool{10: true, 11: true, 12: true, 40: true, 97: true}
	var mu sync.Mutex
	sent := map[uint32]int{} // transmissions per segment (MO / payload)
	seg := uint32(0)
	setSendmmsg(srv, func(fd int, msgs []unix.Mmsghdr) (int, error) { // engines_internal_test.go
		mu.Lock()
		defer mu.Unlock()
		for i := range msgs {
			var d []byte
			for _, v := range unsafe.Slice(msgs[i].Hdr.Iov, msgs[i].Hdr.Iovlen) {
				d = append(d, unsafe.Slice(v.Base, v.Len)...)
			}
			if rh, _, err := dgram.ParseRDHeader(d[dgram.KeyHeaderLen:]); err == nil && rh.Type == dgram.RDData {
				if dh, n, err := ddp.Parse(d[dgram.KeyHeaderLen+dgram.RDHeaderLen:]); err == nil && !dh.Tagged && dh.QN == rdmap.QNSend && dh.MSN == 2 {
					if seg == 0 {
						seg = uint32(len(d) - dgram.KeyHeaderLen - dgram.RDHeaderLen - n - crc32c.Size)
					}
					k := dh.MO / seg
					sent[k]++
					if drop[k] && sent[k] == 1 {
						continue
					}
				}
			}
			ud.SysSendmmsg(fd, msgs[i:i+1])
		}
		return len(msgs), nil
	})
	pattern(a.mr.Buf[:size], 5)
	clear(b.mr.Buf[:size])
	b.recv(t, 1, 0, size)
	a.post(t, proto.SQE{WRID: 1, Opcode: proto.WRSend, Flags: proto.SendSignaled, AH: a.ah(t, b)}, []proto.SGE{a.mr.SGE(0, size)})
	if rc := waitN(t, b.rcq, 1, "recv")[0]; rc.Status != proto.WCSuccess || int(rc.ByteLen) != size {
		t.Fatalf("receive completion %+v", rc)
	}
	if sc := waitN(t, a.scq, 1, "send")[0]; sc.Status != proto.WCSuccess {
		t.Fatalf("send completion %+v", sc)
	}
	if !bytes.Equal(a.mr.Buf[:size], b.mr.Buf[:size]) {
		t.Fatal("payload differs")
	}
	mu.Lock()
	defer mu.Unlock()
	count := (size + int(seg) - 1) / int(seg)
	for k := range uint32(count) {
		switch {
		case sent[k] == 0:
			t.Fatalf("segment %d never sent (%d octets per segment)", k, seg)
		case drop[k] && sent[k] < 2:
			t.Fatalf("segment %d lost and not sent again", k)
		case !drop[k] && sent[k] > 1:
			t.Logf("segment %d sent %d times (a spurious timeout?)", k, sent[k])
		}
	}
}
