package rd

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"net/netip"
	"testing"
	"time"

	"github.com/iwarpd/iwarpd/ddp"
	"github.com/iwarpd/iwarpd/internal/crc32c"
	"github.com/iwarpd/iwarpd/llp/dgram"
	"github.com/iwarpd/iwarpd/llp/rd"
	"github.com/iwarpd/iwarpd/proto"
	"github.com/iwarpd/iwarpd/rdmap"
	"github.com/iwarpd/iwarpd/verbsd/config"
	"github.com/iwarpd/iwarpd/verbsd/rnic"
	"github.com/iwarpd/iwarpd/verbsd/ud"
)

// The receive fast lane (recv_run.go) judged against the general path:
// the same datagrams, cut into GRO-coalesced slots as recvmmsg returns
// them, go through the real engine code (judge: datagrams, runTake,
// datagram, llp/rd, placeResponse, Translate into a registered region)
// of two QPs, one with the fast lane and one without (noRun); every
// outcome must be the same — octets placed and not placed, the Read's
// state, llp/rd's counters and the acknowledgement it sends, the
// engine's counters — and the fast lane must have taken the datagrams
// that continue a run and no other.

const (
	laneQKey    = 0x5151
	laneSrcQKey = 0x7272
	laneLKey    = 0x100
	laneAddr    = 0x7000_0000
	lanePay     = 1400 // payload octets per Read Response segment
)

// laneOurs is the QP's incarnation.
const laneOurs = 0xA11CE

var laneSrc = netip.MustParseAddrPort("10.9.0.2:31000")

// laneRig is one RD QP of an engine put together from its real parts, a
// region of 1 MiB registered for local write, and an RDMA Read of total
// octets into its start outstanding to laneSrc.
type laneRig struct {
	e    *Engine
	q    *QP
	mem  []byte
	w    *wr
	inc  uint32 // the peer's incarnation
	now  time.Time
	slot int // slots filled for the next judge
}

func newLaneRig(t testing.TB, crc, noRun bool, total int) *laneRig {
	t.Helper()
	e := &Engine{Engine: ud.NewEngine(&rnic.Engine{})}
	s := &rnic.Session{Keys: map[uint32]*rnic.MR{}}
	pd := &rnic.PD{}
	mem := make([]byte, 1<<20)
	m := &rnic.MR{LKey: laneLKey, RKey: laneLKey + 1, PD: pd, Mem: mem, Addr: laneAddr, Access: proto.AccessLocalWrite}
	s.Keys[m.LKey], s.Keys[m.RKey] = m, m
	cq := &rnic.QP{Session: s, PD: pd, State: proto.QPStateRTS, Type: proto.QPTypeRD, FD: -1}
	cfg := config.DefaultConfig()
	store := 0
	q := newQPView(&ud.QP{QP: cq, NoCRC: !crc, Qkey: laneQKey}, newRDState(&cfg.RD, 1472, 4<<20, &store))
	link := q.Rd.ep.Config()
	link.CookieKey = [16]byte{1, 2, 3}       // the same cookie at both QPs of a comparison
	q.Rd.ep = rd.NewEndpoint(link, laneOurs) // an incarnation the datagrams can echo
	q.Rd.noRun = noRun
	q.Rd.crcDrops = 1 // badCRC logs a QP's first drop through the device's limiter, which the rig has not
	g := &laneRig{e: e, q: q, mem: mem, inc: 0xC0FFEE, now: time.Unix(1e9, 0)}
	g.read(total)
	return g
}

// read makes a new RDMA Read of total octets into the region's start the
// one outstanding.
func (g *laneRig) read(total int) {
	g.w = &wr{op: proto.WRRDMARead, peer: laneSrc, sent: 1, total: total,
		sink: proto.SGE{Addr: laneAddr, Length: uint32(total), LKey: laneLKey}}
	g.q.Rd.wrs = append(g.q.Rd.wrs[:0], g.w)
}

// dg describes one Read Response datagram: segment k of the Read (its
// TO, its payload: segment k's pattern), sequence number seq; mutate
// changes its headers before the CRC is computed, corrupt after.
type dg struct {
	seq, k  uint32
	last    bool
	n       int // payload octets (0: lanePay)
	mutate  func(h *dgram.RDHeader, d *ddp.Header)
	corrupt bool
}

func (g *laneRig) datagram(x dg) []byte {
	n := x.n
	if n == 0 {
		n = lanePay
	}
	h := dgram.RDHeader{Version: dgram.RDVersion, Type: dgram.RDData, Flags: dgram.FlagExtSACK, Incarnation: g.inc,
		Seq: x.seq, CumAck: g.q.Rd.ep.Cookie(laneSrc)}
	d := ddp.Header{Tagged: true, Last: x.last, Version: ddp.Version, ULPControl: uint8(rdmap.MakeControl(rdmap.OpReadResponse)),
		Stag: laneLKey, TO: laneAddr + uint64(x.k)*lanePay}
	if x.mutate != nil {
		x.mutate(&h, &d)
	}
	seg := d.Append(nil)
	for i := range n {
		seg = append(seg, byte(int(x.k)*31+i*7+i>>8))
	}
	b := dgram.AppendRD(nil, dgram.Keys{QKey: laneQKey, SrcQKey: laneSrcQKey}, &h, !g.q.NoCRC, seg)
	if x.corrupt {
		b[len(b)-crc32c.Size-1] ^= 0x20
	}
	return b
}

// fill puts the datagrams into the next recvmmsg slot, coalesced as GRO
// does (all of one size but the last).
func (g *laneRig) fill(dgs ...dg) {
	var buf []byte
	size := 0
	for i, x := range dgs {
		b := g.datagram(x)
		if i == 0 {
			size = len(b)
		}
		buf = append(buf, b...)
	}
	s := &g.e.Rb.Slots[g.slot]
	s.View, s.N, s.Gso, s.Src, s.Trunc = [][]byte{buf}, len(buf), 0, laneSrc, false
	if len(dgs) > 1 {
		s.Gso = size
	}
	g.slot++
}

func (g *laneRig) judge() {
	g.e.judge(g.q, g.slot, g.now)
	g.slot = 0
}

// seqs returns the datagrams of segments from..to (inclusive) of the
// Read, sequence number = segment + 1, the last segment of a Read of
// segs segments marked last.
func seqs(from, to, segs uint32) []dg {
	var out []dg
	for k := from; k <= to; k++ {
		out = append(out, dg{seq: k + 1, k: k, last: k == segs-1})
	}
	return out
}

// outcome is what the two QPs must agree on.
type outcome struct {
	placed     uint32
	done, fin  bool
	status     proto.WCStatus
	ep         string
	acks       string
	counters   string
	rdCounters [counterCount]int64
}

func (g *laneRig) outcome() outcome {
	o := outcome{placed: g.w.placed, done: g.w.done, fin: g.w.respFinal, status: g.w.status}
	o.ep = fmt.Sprintf("%+v", g.q.Rd.ep.Stats())
	for _, a := range g.q.Rd.ep.Poll(g.now, nil) {
		h := a.Header
		o.acks += fmt.Sprintf("%v %v flags %#x cum %d sack %#x seq %d win %d; ", a.Kind, a.Token, h.Flags, h.CumAck, h.SACK, h.Seq, h.Window)
	}
	o.counters = fmt.Sprintf("%v", g.q.QP.QP.Stats)
	o.rdCounters = g.q.Rd.stats
	o.rdCounters[runTaken] = 0
	return o
}

// laneCase runs slots of datagrams through both QPs and compares.
type laneCase struct {
	name  string
	total int    // the Read's length (0: segs × lanePay)
	segs  uint32 // segments of the Read
	slots [][]dg // recvmmsg slots, judged as one batch
	taken int64  // datagrams the fast lane must take
	crc   bool   // the QP checks CRC
	after func(t *testing.T, g *laneRig)
}

func (c laneCase) run(t *testing.T) {
	total := c.total
	if total == 0 {
		total = int(c.segs) * lanePay
	}
	fast, slow := newLaneRig(t, c.crc, false, total), newLaneRig(t, c.crc, true, total)
	for _, g := range []*laneRig{fast, slow} {
		for _, s := range c.slots {
			g.fill(s...)
		}
		g.judge()
	}
	if got := fast.q.Rd.stats[runTaken]; got != c.taken {
		t.Errorf("fast lane took %d datagrams, want %d", got, c.taken)
	}
	if got := slow.q.Rd.stats[runTaken]; got != 0 {
		t.Errorf("the general path's QP took %d in the fast lane", got)
	}
	if n := fast.q.Rd.stats[runLost]; n != 0 {
		t.Errorf("%d runs lost", n)
	}
	if !bytes.Equal(fast.mem, slow.mem) {
		t.Errorf("placed octets differ")
	}
	if c.after != nil {
		c.after(t, fast)
	}
	of, os := fast.outcome(), slow.outcome()
	if of != os {
		t.Errorf("outcome differs:\nfast lane %+v\ngeneral   %+v", of, os)
	}
}

func TestRunLane(t *testing.T) {
	done := func(t *testing.T, g *laneRig) {
		t.Helper()
		if !g.w.done || g.w.status != proto.WCSuccess || int(g.w.placed) != g.w.total {
			t.Errorf("Read: done %v status %v placed %d of %d", g.w.done, g.w.status, g.w.placed, g.w.total)
		}
	}
	notDone := func(t *testing.T, g *laneRig) {
		t.Helper()
		if g.w.done {
			t.Errorf("Read done (%v, %d placed)", g.w.status, g.w.placed)
		}
	}
	without := func(d []dg, seq uint32) []dg {
		var out []dg
		for _, x := range d {
			if x.seq != seq {
				out = append(out, x)
			}
		}
		return out
	}
	with := func(d []dg, at int, x dg) []dg {
		return append(append(append([]dg(nil), d[:at]...), x), d[at:]...)
	}
	changeFrom := func(d []dg, from, to uint32, f func(*dg)) []dg {
		out := append([]dg(nil), d...)
		for i := range out {
			if out[i].seq >= from && out[i].seq <= to {
				f(&out[i])
			}
		}
		return out
	}
	change := func(d []dg, seq uint32, f func(*dg)) []dg { return changeFrom(d, seq, seq, f) }
	for _, crc := range []bool{true, false} {
		cases := []laneCase{
			{name: "one slot", segs: 45, slots: [][]dg{seqs(0, 44, 45)}, taken: 44, after: done},
			{name: "two slots", segs: 60, slots: [][]dg{seqs(0, 44, 60), seqs(45, 59, 60)}, taken: 59, after: done},
			{name: "one datagram per slot", segs: 4, slots: [][]dg{seqs(0, 0, 4), seqs(1, 1, 4), seqs(2, 2, 4), seqs(3, 3, 4)},
				taken: 3, after: done},
			// Datagram 20 lost: the run ends at 19, the rest is held.
			{name: "hole", segs: 45, slots: [][]dg{without(seqs(0, 44, 45), 20)}, taken: 18, after: notDone},
			// The hole filled in the next slot: delivered and released by llp/rd.
			{name: "hole filled", segs: 46, slots: [][]dg{without(seqs(0, 44, 46), 20), seqs(19, 19, 46)}, taken: 18, after: notDone},
			// A duplicate of 10 after 20: the general path; 21 opens a new run.
			{name: "duplicate", segs: 45, slots: [][]dg{with(seqs(0, 44, 45), 20, dg{seq: 10, k: 9})}, taken: 43, after: done},
			// Segment 15 of another STag: delivered by RD, dropped by the
			// placement (no such Read); the Read's later segments no longer
			// follow what it placed.
			{name: "other STag", segs: 45, slots: [][]dg{change(seqs(0, 44, 45), 15, func(x *dg) {
				x.mutate = func(_ *dgram.RDHeader, d *ddp.Header) { d.Stag++ }
			})}, taken: 13 + 29, after: notDone},
			{name: "bad offset", segs: 45, slots: [][]dg{change(seqs(0, 44, 45), 15, func(x *dg) {
				x.mutate = func(_ *dgram.RDHeader, d *ddp.Header) { d.TO++ }
			})}, taken: 13 + 29, after: notDone},
			// The last segment runs past the sink (the Read asked for 100
			// octets less): dropped; nothing beyond the sink is written.
			{name: "beyond the sink", segs: 45, total: 45*lanePay - 100, slots: [][]dg{seqs(0, 44, 45)}, taken: 44,
				after: func(t *testing.T, g *laneRig) {
					notDone(t, g)
					if z := g.mem[g.w.total : 45*lanePay]; !bytes.Equal(z, make([]byte, len(z))) {
						t.Error("octets written beyond the Read's sink")
					}
				}},
			// Another incarnation of the peer from 30 on: a new space (it
			// must start at 1: RESET).
			{name: "new incarnation", segs: 45, slots: [][]dg{changeFrom(seqs(0, 44, 45), 30, 45, func(x *dg) {
				x.mutate = func(h *dgram.RDHeader, _ *ddp.Header) { h.Incarnation++ }
			})}, taken: 28, after: notDone},
			// ACKREQ on one datagram: still the run (acknowledged at once).
			{name: "ackreq", segs: 45, slots: [][]dg{change(seqs(0, 44, 45), 30, func(x *dg) {
				x.mutate = func(h *dgram.RDHeader, _ *ddp.Header) { h.Flags |= dgram.FlagAckReq }
			})}, taken: 44, after: done},
			// A NOTREADY flag on DATA: not a run datagram (the general path
			// applies it).
			{name: "other flags", segs: 45, slots: [][]dg{change(seqs(0, 44, 45), 30, func(x *dg) {
				x.mutate = func(h *dgram.RDHeader, _ *ddp.Header) { h.Flags |= dgram.FlagNotReady }
			})}, taken: 28 + 14, after: done},
			// Piggybacked acknowledgements from 30 on (the opener's, applied
			// once), and from 38 on one acknowledging what was never sent:
			// the general path applies it (BadAcks).
			{name: "ack fields change", segs: 45, slots: [][]dg{changeFrom(changeFrom(seqs(0, 44, 45), 30, 45, func(x *dg) {
				x.mutate = func(h *dgram.RDHeader, _ *ddp.Header) {
					h.Flags |= dgram.FlagAck
					h.EchoedIncarnation, h.CumAck, h.Window = laneOurs, 1, 64
				}
			}), 38, 38, func(x *dg) {
				x.mutate = func(h *dgram.RDHeader, _ *ddp.Header) {
					h.Flags |= dgram.FlagAck
					h.EchoedIncarnation, h.CumAck, h.Window = laneOurs, 2, 64
				}
			})}, taken: 28 + 7 + 6, after: done},
			// A peer that never proved its address (a wrong cookie): nothing
			// is taken, nothing placed.
			{name: "not proven", segs: 45, slots: [][]dg{func() []dg {
				d := seqs(0, 44, 45)
				for i := range d {
					d[i].mutate = func(h *dgram.RDHeader, _ *ddp.Header) { h.CumAck ^= 1 }
				}
				return d
			}()}, taken: 0, after: func(t *testing.T, g *laneRig) {
				if g.w.placed != 0 {
					t.Errorf("%d octets placed from an unproven peer", g.w.placed)
				}
			}},
		}
		if crc {
			// A corrupted datagram: dropped (drop_crc), a hole after it.
			cases = append(cases, laneCase{name: "bad CRC", segs: 45, slots: [][]dg{change(seqs(0, 44, 45), 25, func(x *dg) {
				x.corrupt = true
			})}, taken: 23, after: func(t *testing.T, g *laneRig) {
				notDone(t, g)
				if n := g.q.QP.QP.Stats[rnic.CDropCRC]; n != 1 {
					t.Errorf("drop_crc %d, want 1", n)
				}
			}})
		}
		for _, c := range cases {
			c.crc = crc
			t.Run(fmt.Sprintf("%s/crc=%v", c.name, crc), c.run)
		}
	}
}

// BenchmarkRecvSlot: the receive path of one GRO-coalesced slot of 45
// Read Response datagrams (1400 octets of payload each, in sequence, one
// message) from judge on — datagrams cut from the slot, CRC, RD state
// machine, placement into the registered sink — per datagram, with the
// fast lane (run) and without (general). The slot is re-sequenced (and
// its CRCs recomputed) outside the timer.
func BenchmarkRecvSlot(b *testing.B) {
	for _, crc := range []bool{true, false} {
		for _, noRun := range []bool{true, false} {
			name := fmt.Sprintf("crc=%v/run", crc)
			if noRun {
				name = fmt.Sprintf("crc=%v/general", crc)
			}
			b.Run(name, func(b *testing.B) {
				const segs = 45
				g := newLaneRig(b, crc, noRun, segs*lanePay)
				g.fill(seqs(0, segs-1, segs)...)
				buf := g.e.Rb.Slots[0].View[0]
				size := g.e.Rb.Slots[0].Gso
				seq := uint32(0)
				reseq := func() {
					for k := range segs {
						d := buf[k*size : (k+1)*size]
						seq++
						binary.BigEndian.PutUint32(d[runSeqAt:], seq)
						if crc {
							body := d[:len(d)-crc32c.Size]
							binary.LittleEndian.PutUint32(d[len(body):], crc32c.Checksum(body))
						}
					}
					g.read(segs * lanePay)
					g.now = g.now.Add(time.Microsecond)
				}
				b.ReportAllocs()
				b.SetBytes(segs * lanePay)
				for b.Loop() {
					b.StopTimer()
					reseq()
					b.StartTimer()
					g.e.judge(g.q, 1, g.now)
					b.StopTimer()
					g.q.Rd.actions = g.q.Rd.ep.Poll(g.now, g.q.Rd.actions[:0]) // the ACK the pass would send
					if !g.w.done || g.w.status != proto.WCSuccess {
						b.Fatalf("Read not done: %+v", g.w)
					}
					b.StartTimer()
				}
				b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*segs), "ns/datagram")
			})
		}
	}
}

// FuzzRunLane: any change to a slot of 45 Read Response datagrams (in
// sequence, one message) — octets XORed at fuzzed positions, the CRC
// trailers recomputed after or not — is judged alike with and without
// the fast lane (laneCase.run's comparison).
func FuzzRunLane(f *testing.F) {
	f.Add([]byte{0, 0, 0, 0})                            // unchanged
	f.Add([]byte{1, 0x05, 0xd0, 0x01})                   // the Seq of datagram 1 (CRCs recomputed)
	f.Add([]byte{1, 0x0b, 0x9f, 0x40})                   // a Last flag in the middle
	f.Add([]byte{0, 0x10, 0x00, 0x80})                   // a payload octet, CRC left stale
	f.Add([]byte{1, 0x2a, 0x00, 0x01, 0x2b, 0x30, 0x08}) // a TO and a flags octet
	f.Fuzz(func(t *testing.T, data []byte) {
		if len(data) < 1 {
			return
		}
		recompute := data[0]&1 != 0
		muts := data[1:]
		mutate := func(g *laneRig) {
			g.fill(seqs(0, 44, 45)...)
			s := &g.e.Rb.Slots[0]
			buf := s.View[0]
			for i := 0; i+2 < len(muts) && i < 3*16; i += 3 {
				pos := int(muts[i])<<8 | int(muts[i+1])
				buf[pos%len(buf)] ^= muts[i+2]
			}
			if recompute && g.q.NoCRC == false {
				for off := 0; off < len(buf); off += s.Gso {
					d := buf[off:min(off+s.Gso, len(buf))]
					body := d[:len(d)-crc32c.Size]
					binary.LittleEndian.PutUint32(d[len(body):], crc32c.Checksum(body))
				}
			}
			g.judge()
		}
		fast, slow := newLaneRig(t, true, false, 45*lanePay), newLaneRig(t, true, true, 45*lanePay)
		mutate(fast)
		mutate(slow)
		if !bytes.Equal(fast.mem, slow.mem) {
			t.Fatal("placed octets differ")
		}
		if of, os := fast.outcome(), slow.outcome(); of != os {
			t.Fatalf("outcome differs:\nfast lane %+v\ngeneral   %+v", of, os)
		}
	})
}
