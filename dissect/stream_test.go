package dissect

import (
	"bytes"
	"strings"
	"testing"

	"github.com/iwarpd/iwarpd/mpa"
	"github.com/iwarpd/iwarpd/rdmap"
)

var enh = mpa.Enhanced{IRD: 4, ORD: 4}

// validStream is a conforming connection: CRC on, a two-segment Send, a
// Read Request and its Read Response, a Write.
func validStream(c *tcpSim) {
	c.negotiate(rev2(false, true, enh), rev2(true, false, enh))
	c.bytes(0, c.fpdu(0, untagged(rdmap.OpSend, 1, 0, false, []byte("hello "))))
	c.bytes(0, c.fpdu(0, untagged(rdmap.OpSend, 1, 6, true, []byte("iwarp"))))
	rr := rdmap.ReadRequest{SinkStag: 0x10, SinkTO: 0x1000, Size: 8, SourceStag: 0x20, SourceTO: 0x2000}
	c.bytes(1, c.fpdu(1, untagged(rdmap.OpReadRequest, 1, 0, true, rr.Append(nil))))
	c.bytes(0, c.fpdu(0, tagged(rdmap.OpReadResponse, 0x10, 0x1000, false, []byte("abcd"))))
	c.bytes(0, c.fpdu(0, tagged(rdmap.OpReadResponse, 0x10, 0x1004, true, []byte("efgh"))))
	c.bytes(1, c.fpdu(1, tagged(rdmap.OpWrite, 0x30, 0x10, true, []byte("w"))))
}

func TestValidStream(t *testing.T) {
	s := newSynth(t)
	validStream(s.conn(1460))
	s.d.Close()
	s.wantNoViolations()
	segs := s.segments()
	want := []string{"Send", "Send", "RDMA Read Request", "RDMA Read Response", "RDMA Read Response", "RDMA Write"}
	if len(segs) != len(want) {
		t.Fatalf("got %d segments, want %d", len(segs), len(want))
	}
	for i, e := range segs {
		if e.RDMAP.Name != want[i] || e.CRC != "ok" {
			t.Errorf("segment %d: %s crc=%s, want %s crc=ok", i, e.RDMAP.Name, e.CRC, want[i])
		}
	}
	if *segs[1].DDP.MO != 6 || segs[1].DDP.PayloadLen != 5 || segs[2].RDMAP.ReadRequest.Size != 8 {
		t.Errorf("decoded fields wrong: %+v %+v", segs[1].DDP, segs[2].RDMAP)
	}
	if s.events[0].Kind != KindMPARequest || s.events[1].Kind != KindMPAReply || *s.events[0].MPA.IRD != 4 {
		t.Errorf("MPA frames: %+v %+v", s.events[0], s.events[1])
	}
}

// TestReassembly feeds the same byte streams cut and ordered differently
// and expects the same decoded sequence and frame attribution.
func TestReassembly(t *testing.T) {
	segA := untagged(rdmap.OpSend, 1, 0, true, []byte("first message"))
	segB := untagged(rdmap.OpSend, 2, 0, true, []byte("second"))
	cases := []struct {
		name string
		run  func(c *tcpSim, a, b []byte)
	}{
		{"in order", func(c *tcpSim, a, b []byte) { c.bytes(0, a); c.bytes(0, b) }},
		{"two FPDUs in one segment", func(c *tcpSim, a, b []byte) { c.bytes(0, append(append([]byte{}, a...), b...)) }},
		{"FPDU split over three segments", func(c *tcpSim, a, b []byte) {
			c.bytes(0, a[:1])
			c.bytes(0, a[1:10])
			c.bytes(0, a[10:])
			c.bytes(0, b)
		}},
		{"out of order", func(c *tcpSim, a, b []byte) {
			base := c.seq[0]
			c.raw(0, base+uint32(len(a)), b, nil)
			c.raw(0, base+5, a[5:], nil)
			c.raw(0, base, a[:5], nil)
			c.seq[0] += uint32(len(a) + len(b))
		}},
		{"retransmission and overlap", func(c *tcpSim, a, b []byte) {
			base := c.seq[0]
			c.raw(0, base, a, nil)
			c.raw(0, base, a, nil)                                              // duplicate
			c.raw(0, base+3, append(append([]byte{}, a[3:]...), b[:4]...), nil) // overlap
			c.raw(0, base+uint32(len(a)), b, nil)
			c.seq[0] += uint32(len(a) + len(b))
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			s := newSynth(t)
			c := s.conn(1460)
			c.negotiate(rev2(false, true, enh), rev2(true, true, enh))
			a, b := c.fpdu(0, segA), c.fpdu(0, segB)
			tc.run(c, a, b)
			s.d.Close()
			s.wantNoViolations()
			segs := s.segments()
			if len(segs) != 2 || *segs[0].DDP.MSN != 1 || *segs[1].DDP.MSN != 2 || segs[0].DDP.PayloadLen != 13 {
				t.Fatalf("decoded %d segments: %+v", len(segs), segs)
			}
			for _, e := range segs {
				if e.CRC != "ok" || e.Frame <= 4 {
					t.Errorf("segment frame %d crc %s", e.Frame, e.CRC)
				}
			}
		})
	}
}

func TestReassemblyGap(t *testing.T) {
	s := newSynth(t)
	c := s.conn(1460)
	c.negotiate(rev2(false, false, enh), rev2(true, false, enh))
	a := c.fpdu(0, untagged(rdmap.OpSend, 1, 0, true, []byte("lost")))
	c.raw(0, c.seq[0]+uint32(len(a)), c.fpdu(0, untagged(rdmap.OpSend, 2, 0, true, nil)), nil)
	s.d.Close()
	v := s.findings(KindViolation)
	if len(v) != 1 || !strings.Contains(v[0], "missing from the capture") {
		t.Fatalf("violations %q", v)
	}
}

func TestReassemblerBound(t *testing.T) {
	var got []byte
	var gaps []uint32
	r := reassembler{max: 10, onData: func(b []byte, _ int) { got = append(got, b...) }, onGap: func(n uint32, _ int) { gaps = append(gaps, n) }}
	r.syn(99)
	r.segment(105, []byte("6789ab"), 1) // hole 100..104
	r.segment(111, []byte("cdefgh"), 2) // exceeds the bound: the hole is given up
	if len(gaps) != 1 || gaps[0] != 5 || string(got) != "6789abcdefgh" {
		t.Fatalf("gaps %v got %q", gaps, got)
	}
	r.segment(100, []byte("12345"), 3) // late: already skipped
	r.segment(117, []byte("i"), 4)
	if string(got) != "6789abcdefghi" {
		t.Fatalf("got %q", got)
	}
}

func TestSplitMPAFrame(t *testing.T) {
	s := newSynth(t)
	c := s.conn(1460)
	req := rev2(false, false, enh)
	b := req.Append(nil)
	c.bytes(0, b[:7])
	c.bytes(0, b[7:])
	rep := rev2(true, false, enh)
	c.bytes(1, rep.Append(nil))
	s.d.Close()
	if len(s.events) != 2 || s.events[0].Kind != KindMPARequest || s.events[0].Frame != 4 {
		t.Fatalf("events %+v", s.events)
	}
}

func TestNotMPA(t *testing.T) {
	s := newSynth(t)
	c := s.conn(1460)
	c.bytes(0, []byte("GET / HTTP/1.1\r\n\r\n"))
	c.bytes(1, bytes.Repeat([]byte("x"), 100))
	s.d.Close()
	if len(s.events) != 0 {
		t.Fatalf("events from a non-MPA stream: %+v", s.events)
	}
}
