package rd

import (
	"bytes"
	"fmt"
	"net/netip"
	"testing"
	"time"
	"unsafe"

	"github.com/iwarpd/iwarpd/ddp"
	"github.com/iwarpd/iwarpd/llp/dgram"
	"github.com/iwarpd/iwarpd/llp/rd"
	"github.com/iwarpd/iwarpd/proto"
	"github.com/iwarpd/iwarpd/rdmap"
	"github.com/iwarpd/iwarpd/verbsd/config"
	"github.com/iwarpd/iwarpd/verbsd/rnic"
	"github.com/iwarpd/iwarpd/verbsd/ud"
	"golang.org/x/sys/unix"
)

var runT0 = time.Unix(2000, 0)

// runRig is an engine and an RD QP with nothing but what building
// datagrams uses: the batch, the QP's keys and CRC choice, its llp/rd
// endpoint (a fixed incarnation, so that two rigs build the same octets).
type runRig struct {
	e    *Engine
	q    *QP
	peer netip.AddrPort
}

func newRunRig(noCRC bool, window int) *runRig {
	cfg := config.DefaultConfig()
	e := &Engine{Engine: ud.NewEngine(&rnic.Engine{Cfg: &cfg})}
	st := newRDState(&cfg.RD, cfg.DatagramSize, 0, nil)
	link := cfg.RD.Link
	link.Window = window
	st.ep = rd.NewEndpoint(link, 0x5eed)
	q := &QP{QP: &ud.QP{QP: &rnic.QP{}, Qkey: 0x1111, NoCRC: noCRC}, Rd: st}
	peer := netip.MustParseAddrPort("10.1.2.3:30001")
	st.setPeerKey(peer, 0x2222)
	return &runRig{e: e, q: q, peer: peer}
}

// batchBytes is what the batch's messages would hand the kernel: per
// message its GSO segment size (0: none) and its octets.
func batchBytes(e *Engine) [][]byte {
	var out [][]byte
	for _, m := range e.Sb.Finish() {
		var d []byte
		if m.Hdr.Controllen > 0 {
			cm := unsafe.Slice(m.Hdr.Control, m.Hdr.Controllen)
			d = append(d, cm[unix.SizeofCmsghdr], cm[unix.SizeofCmsghdr+1])
		} else {
			d = append(d, 0, 0)
		}
		for _, v := range unsafe.Slice(m.Hdr.Iov, m.Hdr.Iovlen) {
			d = append(d, unsafe.Slice(v.Base, v.Len)...)
		}
		out = append(out, d)
	}
	return out
}

// runCase is a message and the run of it to build.
type runCase struct {
	name   string
	segs   ddp.Segmenter
	tagged bool
	ulp    func(off uint32) []byte // the RDMAP header of the segment at off (nil: none)
	wrec   bool
	parts  [][]byte // the message's octets, cut anywhere
	buf    [][]byte // piecesAt's scratch
	first  uint32   // the run's first segment
	ackReq bool     // a Write-Record: ACKREQ on its last datagram
}

func (c *runCase) ulpAt(off uint32) []byte {
	if c.ulp == nil {
		return nil
	}
	return c.ulp(off)
}

// piecesAt appends octets [off, off+n) of the message, as pieces of
// parts, to ps.
func (c *runCase) piecesAt(ps [][]byte, off, n int) [][]byte {
	pos := 0
	for _, p := range c.parts {
		lo, hi := max(off, pos), min(off+n, pos+len(p))
		if lo < hi {
			ps = append(ps, p[lo-pos:hi-pos])
		}
		pos += len(p)
	}
	return ps
}

// each builds n datagrams of c from c.first on the per-datagram way:
// Endpoint.Send and batch.add with the encoders.
func (g *runRig) each(t testing.TB, c *runCase, n int) int {
	b := &batch{e: g.e.Engine, q: g.q}
	g.e.Sb.Reset(true)
	sent := 0
	for i := range n {
		h, err := g.q.Rd.ep.Send(runT0, g.peer, rd.Token(1000+i))
		if err != nil {
			break
		}
		s := c.segs.Segment(c.first + uint32(i))
		if c.ackReq && c.first+uint32(i) == c.segs.Count()-1 {
			h.Flags |= dgram.FlagAckReq
		}
		c.buf = c.piecesAt(c.buf[:0], int(s.Offset), s.Len)
		if !b.add(g.peer, &h, &s.Header, c.ulpAt(s.Offset), c.buf) {
			t.Fatalf("%s: datagram %d does not fit", c.name, i)
		}
		sent++
	}
	return sent
}

// run builds them as one run: SendRun and buildRun.
func (g *runRig) run(t testing.TB, c *runCase, n int) int {
	b := &batch{e: g.e.Engine, q: g.q}
	g.e.Sb.Reset(true)
	r, err := g.q.Rd.ep.SendRun(runT0, g.peer, 1000, n)
	if err != nil {
		t.Fatalf("%s: %v", c.name, err)
	}
	s0 := c.segs.Segment(c.first)
	lo := int(s0.Offset)
	last := c.segs.Segment(c.first + uint32(r.N) - 1)
	end := c.first+uint32(r.N) == c.segs.Count()
	sp := runSpec{run: r, first: c.first, segs: &c.segs, tagged: c.tagged, wrec: c.wrec, ackReq: c.ackReq && end,
		parts: c.piecesAt(c.buf[:0], lo, int(last.Offset)+last.Len-lo)}
	g.e.buildRun(b, g.peer, &sp, c.ulpAt(s0.Offset))
	c.buf = sp.parts[:0]
	return r.N
}

// runCases are messages of every kind a run carries, with their octets
// in one or several parts.
func runCases(t testing.TB, datagramSize int) []runCase {
	maxSeg := dgram.MaxSegment(datagramSize, true)
	msg := make([]byte, 1<<20)
	for i := range msg {
		msg[i] = byte(i*13 + i>>9)
	}
	cut := func(b []byte, at ...int) [][]byte {
		var ps [][]byte
		prev := 0
		for _, a := range at {
			ps = append(ps, b[prev:a])
			prev = a
		}
		return append(ps, b[prev:])
	}
	var cs []runCase
	for _, size := range []int{2*1400 + 1, 65536, 300*1400 + 77, 1 << 20} {
		m := msg[:size]
		resp, _ := ddp.TaggedSegments(uint8(rdmap.MakeControl(rdmap.OpReadResponse)), 0xabcd, 0x7fff_0000_1234, uint32(size),
			ddp.MaxPayload(maxSeg, true, 0))
		cs = append(cs, runCase{name: fmt.Sprintf("read response %d", size), segs: resp, tagged: true, parts: cut(m)})
		send, _ := ddp.UntaggedSegments(uint8(rdmap.MakeControl(rdmap.OpSendSE)), 0, rdmap.QNSend, 77, uint32(size),
			ddp.MaxPayload(maxSeg, false, 0))
		cs = append(cs, runCase{name: fmt.Sprintf("send %d, 3 SGEs", size), segs: send,
			parts: cut(m, size/3, size/3+700)})
		imm := rdmap.MakeImmediateData(0xfeed).Raw
		withImm, _ := ddp.UntaggedSegments(uint8(rdmap.MakeControl(rdmap.OpImmediateData)), 0, rdmap.QNSend, 78, uint32(size),
			ddp.MaxPayload(maxSeg, false, rdmap.ImmediateDataLen))
		cs = append(cs, runCase{name: fmt.Sprintf("send with imm %d", size), segs: withImm, parts: cut(m, 1),
			ulp: func(uint32) []byte { return imm[:] }})
		for _, hasImm := range []bool{false, true} {
			w := &wr{op: proto.WRWriteRecord, rec: rdmap.WriteRecord{RecordID: 79, MessageLength: uint32(size)}, imm: imm}
			if hasImm {
				w.op = proto.WRWriteRecordWithImm
			}
			var rh [rdmap.WriteRecordImmLen]byte
			wsegs, _, _ := ud.WriteRecordSegments(&proto.SQE{Opcode: w.op, RKey: 0x4242, RemoteAddr: 0x1000_0003}, 79, size,
				ddp.MaxPayload(maxSeg, true, ud.WrecULPLen(w.op)))
			cs = append(cs, runCase{name: fmt.Sprintf("write-record %d imm %v", size, hasImm), segs: wsegs, tagged: true, wrec: true,
				parts: cut(m, size-5), ackReq: true, ulp: func(off uint32) []byte { return w.writeRecordHeader(rh[:0], off) }})
		}
	}
	return cs
}

// TestBuildRunEqualsAdd: a run's datagrams — headers from a template,
// payload carved from the run's parts — are octet for octet the ones
// the per-datagram path builds with Endpoint.Send and batch.add, in the
// same sendmmsg messages (GSO segment sizes), for Read Responses, Sends
// (with Immediate, several SGEs) and Write-Records (with Immediate),
// runs from the first segment and from the middle, the window closing
// inside the run (ACKREQ) and not, CRC on and off.
func TestBuildRunEqualsAdd(t *testing.T) {
	for _, noCRC := range []bool{false, true} {
		for _, window := range []int{256, 9} {
			cs := runCases(t, config.DefaultConfig().DatagramSize)
			for i := range cs {
				c := &cs[i]
				for _, first := range []uint32{0, 1, 5} {
					if first+1 >= c.segs.Count() {
						continue
					}
					c.first = first
					each, runs := newRunRig(noCRC, window), newRunRig(noCRC, window)
					n := min(int(c.segs.Count()-first), maxBatch)
					what := fmt.Sprintf("%s from %d, window %d, crc %v", c.name, first, window, !noCRC)
					n = min(n, runs.e.Sb.Room(runs.peer, 1500, 4, runs.e.Cfg.PollBatch, n))
					ne, nr := each.each(t, c, n), runs.run(t, c, n)
					if ne != nr || nr < 2 {
						t.Fatalf("%s: %d datagrams each way, %d in the run", what, ne, nr)
					}
					want, got := batchBytes(each.e), batchBytes(runs.e)
					if len(want) != len(got) {
						t.Fatalf("%s: %d messages, per-datagram path %d", what, len(got), len(want))
					}
					for m := range want {
						if !bytes.Equal(got[m], want[m]) {
							k := 0
							for k < len(got[m]) && k < len(want[m]) && got[m][k] == want[m][k] {
								k++
							}
							t.Fatalf("%s: message %d differs at octet %d (of %d, %d)", what, m, k, len(got[m]), len(want[m]))
						}
					}
				}
			}
		}
	}
}

// BenchmarkBuildRun: building the 738 datagrams of a 1 MiB Read
// Response (1422 octets of payload each) into batches of up to 256
// datagrams, with a run per batch and datagram by datagram (Endpoint.Send
// and batch.add; the old path's per-datagram look-ups of the response and
// its source are not even counted), each batch acknowledged whole before
// the next; CRC on and off. ns/datagram and allocs per message.
func BenchmarkBuildRun(b *testing.B) {
	cfg := config.DefaultConfig()
	maxSeg := dgram.MaxSegment(cfg.DatagramSize, true)
	msg := make([]byte, 1<<20)
	segs, _ := ddp.TaggedSegments(uint8(rdmap.MakeControl(rdmap.OpReadResponse)), 0xabcd, 0x1000, 1<<20, ddp.MaxPayload(maxSeg, true, 0))
	for _, noCRC := range []bool{false, true} {
		for _, mode := range []string{"each", "run"} {
			b.Run(fmt.Sprintf("%s/crc=%v", mode, !noCRC), func(b *testing.B) {
				g := newRunRig(noCRC, 256)
				ack := dgram.RDHeader{Version: dgram.RDVersion, Type: dgram.RDAck, Flags: dgram.FlagAck, Window: 4096,
					Incarnation: 0x77, EchoedIncarnation: 0x5eed}
				c := &runCase{segs: segs, tagged: true, parts: [][]byte{msg}}
				var acts []rd.Action
				next := uint32(1)
				b.ReportAllocs()
				for b.Loop() {
					for c.first = 0; c.first < segs.Count(); {
						n := min(int(segs.Count()-c.first), maxBatch)
						if mode == "each" {
							n = g.each(b, c, n)
						} else {
							n = g.run(b, c, n)
						}
						c.first += uint32(n)
						next += uint32(n)
						ack.CumAck = next
						g.q.Rd.ep.Receive(runT0, g.peer, ack, true)
						acts = g.q.Rd.ep.Poll(runT0, acts[:0])
					}
				}
				b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/float64(segs.Count()), "ns/datagram")
			})
		}
	}
}
