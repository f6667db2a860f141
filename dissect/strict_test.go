package dissect

import (
	"strings"
	"testing"

	"github.com/iwarpd/iwarpd/mpa"
	"github.com/iwarpd/iwarpd/rdmap"
)

// TestStrictViolations injects one violation into an otherwise valid
// synthetic stream and expects it named, with its frame number.
func TestStrictViolations(t *testing.T) {
	send := func(c *tcpSim, side int, seg []byte) { c.bytes(side, c.fpdu(side, seg)) }
	std := func(c *tcpSim) { c.negotiate(rev2(false, true, enh), rev2(true, false, enh)) }
	cases := []struct {
		name string
		mss  uint16
		run  func(c *tcpSim)
		want string
	}{
		{"crc error", 1460, func(c *tcpSim) {
			std(c)
			f := c.fpdu(0, untagged(rdmap.OpSend, 1, 0, true, []byte("x")))
			f[len(f)-1] ^= 1
			c.bytes(0, f)
		}, "MPA CRC error"},
		{"pad not zero", 1460, func(c *tcpSim) {
			c.negotiate(rev2(false, false, enh), rev2(true, false, enh))    // CRC off: only the pad is wrong
			f := c.fpdu(0, untagged(rdmap.OpSend, 1, 0, true, []byte("x"))) // 2+19: 3 pad octets
			f[len(f)-5] = 0xaa
			c.bytes(0, f)
		}, "pad octets not zero"},
		{"MSN gap", 1460, func(c *tcpSim) {
			std(c)
			send(c, 0, untagged(rdmap.OpSend, 1, 0, true, nil))
			send(c, 0, untagged(rdmap.OpSend, 3, 0, true, nil))
		}, "MSN 3, want 2"},
		{"MSN not starting at 1", 1460, func(c *tcpSim) {
			std(c)
			send(c, 0, untagged(rdmap.OpSend, 0, 0, true, nil))
		}, "MSN 0, want 1"},
		{"MO not contiguous", 1460, func(c *tcpSim) {
			std(c)
			send(c, 0, untagged(rdmap.OpSend, 1, 0, false, []byte("abc")))
			send(c, 0, untagged(rdmap.OpSend, 1, 4, true, []byte("d")))
		}, "MO 4, want 3"},
		{"missing L", 1460, func(c *tcpSim) {
			std(c)
			send(c, 0, untagged(rdmap.OpSend, 1, 0, false, []byte("abc")))
			send(c, 0, untagged(rdmap.OpSend, 2, 0, true, nil))
		}, "ended without L"},
		{"TO not contiguous", 1460, func(c *tcpSim) {
			std(c)
			send(c, 0, tagged(rdmap.OpWrite, 7, 100, false, []byte("abcd")))
			send(c, 0, tagged(rdmap.OpWrite, 7, 105, true, []byte("e")))
		}, "want TO 0x68"},
		{"DDP reserved bits", 1460, func(c *tcpSim) {
			std(c)
			s := untagged(rdmap.OpSend, 1, 0, true, nil)
			s[0] |= 0x04
			send(c, 0, s)
		}, "DDP reserved bits"},
		{"DDP version", 1460, func(c *tcpSim) {
			std(c)
			s := untagged(rdmap.OpSend, 1, 0, true, nil)
			s[0] = s[0]&^3 | 2
			send(c, 0, s)
		}, "DDP version 2"},
		{"RDMAP version", 1460, func(c *tcpSim) {
			std(c)
			s := untagged(rdmap.OpSend, 1, 0, true, nil)
			s[1] = 0x83
			send(c, 0, s)
		}, "RDMAP version 2"},
		{"RDMAP reserved", 1460, func(c *tcpSim) {
			std(c)
			s := untagged(rdmap.OpSend, 1, 0, true, nil)
			s[1] |= 0x10
			send(c, 0, s)
		}, "RDMAP reserved bits"},
		{"QN does not match opcode", 1460, func(c *tcpSim) {
			std(c)
			s := untagged(rdmap.OpSend, 1, 0, true, nil)
			s[9] = 1 // QN 1
			send(c, 0, s)
		}, "Send on QN 1 (want 0)"},
		{"Write-Record on RC", 1460, func(c *tcpSim) {
			std(c)
			w := rdmap.WriteRecord{MessageLength: 1}
			send(c, 0, tagged(rdmap.OpWriteRecord, 1, 0, true, w.Append([]byte(nil))))
		}, "datagram-profile opcode"},
		{"FPDU above MULPDU", 200, func(c *tcpSim) {
			std(c)
			send(c, 0, untagged(rdmap.OpSend, 1, 0, true, make([]byte, 300)))
		}, "exceeds MULPDU"},
		{"MPA revision", 1460, func(c *tcpSim) {
			c.negotiate(mpa.Frame{Revision: 3}, mpa.Frame{Reply: true, Revision: 1})
		}, "revision 3"},
		{"MPA reserved flags", 1460, func(c *tcpSim) {
			c.negotiate(mpa.Frame{Revision: 1, ReservedFlags: 0x04}, mpa.Frame{Reply: true, Revision: 1})
		}, "reserved flag bits 0x4"},
		{"P2P not echoed", 1460, func(c *tcpSim) {
			c.negotiate(rev2(false, false, mpa.Enhanced{IRD: 1, ORD: 1, PeerToPeer: true, WriteRTR: true}), rev2(true, false, enh))
		}, "does not echo"},
		{"P2P wrong RTR", 1460, func(c *tcpSim) {
			e := mpa.Enhanced{IRD: 1, ORD: 1, PeerToPeer: true, WriteRTR: true}
			c.negotiate(rev2(false, false, e), rev2(true, false, e))
			send(c, 0, untagged(rdmap.OpSend, 1, 0, true, []byte("x")))
		}, "not the negotiated zero-length RTR"},
		{"responder sends first", 1460, func(c *tcpSim) {
			std(c)
			send(c, 1, untagged(rdmap.OpSend, 1, 0, true, nil))
		}, "responder sent an FPDU before"},
		{"Read Response without request", 1460, func(c *tcpSim) {
			std(c)
			send(c, 0, tagged(rdmap.OpReadResponse, 1, 0, true, nil))
		}, "without an outstanding Read Request"},
		{"Read Response length", 1460, func(c *tcpSim) {
			std(c)
			send(c, 0, untagged(rdmap.OpSend, 1, 0, true, nil))
			rr := rdmap.ReadRequest{SinkStag: 9, Size: 4}
			send(c, 1, untagged(rdmap.OpReadRequest, 1, 0, true, rr.Append(nil)))
			send(c, 0, tagged(rdmap.OpReadResponse, 9, 0, true, []byte("abc")))
		}, "Read Response of 3 octets, Read Request size 4"},
		{"segment after Terminate", 1460, func(c *tcpSim) {
			std(c)
			tm := rdmap.TerminateFor(rdmap.Terminate{}.Err, nil, nil)
			send(c, 0, untagged(rdmap.OpTerminate, 1, 0, true, tm.Append(nil)))
			send(c, 0, untagged(rdmap.OpSend, 1, 0, true, nil))
		}, "Send after a Terminate"},
		{"Read Request in two segments", 1460, func(c *tcpSim) {
			std(c)
			rr := rdmap.ReadRequest{Size: 1}
			send(c, 0, untagged(rdmap.OpReadRequest, 1, 0, false, rr.Append(nil)))
		}, "must be a single segment"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			s := newSynth(t)
			tc.run(s.conn(tc.mss))
			s.d.Close()
			v := s.findings(KindViolation)
			found := false
			for _, m := range v {
				found = found || strings.Contains(m, tc.want)
			}
			if !found {
				t.Fatalf("want a violation containing %q, got %q (notes %q)", tc.want, v, s.findings(KindNote))
			}
			for _, e := range s.events {
				if e.Kind == KindViolation && e.Frame == 0 {
					t.Errorf("violation without a frame: %s", e.Message)
				}
			}
		})
	}
}

func TestNoSYNNote(t *testing.T) {
	s := newSynth(t)
	c := s.conn(0)
	c.negotiate(rev2(false, false, enh), rev2(true, false, enh))
	c.bytes(0, c.fpdu(0, untagged(rdmap.OpSend, 1, 0, true, nil)))
	s.d.Close()
	s.wantNoViolations()
	if n := s.findings(KindNote); len(n) != 1 || !strings.Contains(n[0], "MULPDU not checked") {
		t.Fatalf("notes %q", n)
	}
}

// With SkipMULPDU an FPDU larger than the MSS in the capture is accepted
// (captures behind qemu's user networking see a rewritten MSS).
func TestSkipMULPDU(t *testing.T) {
	s := newSynth(t)
	cfg := DefaultConfig()
	cfg.SkipMULPDU = true
	s.d = NewDecoder(cfg, func(e *Event) { s.events = append(s.events, e) })
	c := s.conn(200)
	c.negotiate(rev2(false, false, enh), rev2(true, false, enh))
	c.bytes(0, c.fpdu(0, untagged(rdmap.OpSend, 1, 0, true, make([]byte, 300))))
	s.d.Close()
	s.wantNoViolations()
}
