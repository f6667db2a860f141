package dissect

import (
	"bytes"
	"strings"
	"testing"

	"github.com/iwarpd/iwarpd/llp/dgram"
	"github.com/iwarpd/iwarpd/rdmap"
)

// TestGSOSuperPacketRD is issue 19's capture: an RD Atomic Response (66
// octets) and the ACK after it (36) sent with one UDP GSO sendmsg, captured
// on the sending host as one 102-octet UDP datagram. It decodes as the two
// datagrams, marked, with no violation (before: a CRC error and "Atomic
// Response carries 36 octets after its header").
func TestGSOSuperPacketRD(t *testing.T) {
	h := dgram.RDHeader{Version: dgram.RDVersion, Type: dgram.RDData, Flags: dgram.FlagAck, Window: 64, Incarnation: 7, Seq: 1}
	resp := rdmap.AtomicResponse{ReqID: 9, Original: 1}
	data := dgram.AppendRD(nil, testKeys, &h, true, untagged(rdmap.OpAtomicResponse, 1, 0, true, resp.Append(nil)))
	ack := dgram.RDHeader{Version: dgram.RDVersion, Type: dgram.RDAck, Flags: dgram.FlagAck, Window: 64, Incarnation: 7, CumAck: 2}
	acks := dgram.AppendRD(nil, testKeys, &ack, true)
	if len(data) != 66 || len(acks) != 36 {
		t.Fatalf("datagrams of %d and %d octets, want 66 and 36", len(data), len(acks))
	}
	s := newSynth(t)
	s.udp(17500, 17501, append(append([]byte{}, data...), acks...))
	s.d.Close()
	s.wantNoViolations()
	// The other note: the Atomic Request is not in this capture.
	if n := s.findings(KindNote); len(n) == 0 || !strings.Contains(n[0], "GSO super-packet of 102 octets") ||
		!strings.Contains(n[0], "2 datagrams of 66 octets, the last 36") {
		t.Fatalf("notes %q", n)
	}
	var got []*Event
	for _, e := range s.events {
		if e.Kind == KindSegment || e.Kind == KindRDAck {
			got = append(got, e)
		}
	}
	if len(got) != 2 || got[0].RDMAP == nil || got[0].RDMAP.Atomic == nil || got[0].CRC != "ok" ||
		got[1].Kind != KindRDAck || got[1].RD.CumAck != 2 || got[1].CRC != "ok" {
		t.Fatalf("events %+v", got)
	}
	for i, e := range got {
		if e.GSO == nil || e.GSO.Index != i+1 || e.GSO.Count != 2 || e.GSO.SegSize != 66 || e.GSO.Len != 102 {
			t.Fatalf("datagram %d: GSO %+v", i, e.GSO)
		}
		if line := FormatText(e, false); !strings.Contains(line, " gso=") {
			t.Fatalf("text line without gso=: %s", line)
		}
	}
}

// TestGSOSuperPacketUD: a Send cut into three segments of equal size and a
// shorter fourth, in one super-packet, gives the four segments in order.
func TestGSOSuperPacketUD(t *testing.T) {
	payload := bytes.Repeat([]byte("0123456789"), 25)
	var super []byte
	for i, mo := 0, 0; mo < len(payload); i++ {
		n := min(100, len(payload)-mo)
		super = append(super, udDatagram(untagged(rdmap.OpSend, 5, uint32(mo), mo+n == len(payload), payload[mo:mo+n]))...)
		mo += n
	}
	s := newSynth(t)
	s.udp(17001, 17002, super)
	s.d.Close()
	s.wantNoViolations()
	segs := s.segments()
	if len(segs) != 3 {
		t.Fatalf("%d segments, want 3 (100+100+50 octets)", len(segs))
	}
	for i, e := range segs {
		if e.GSO == nil || e.GSO.Index != i+1 || e.GSO.Count != 3 || *e.DDP.MO != uint32(100*i) || e.DDP.Last != (i == 2) {
			t.Fatalf("segment %d: %+v GSO %+v DDP %+v", i, e, e.GSO, e.DDP)
		}
	}
}

// TestGSONotSplit: what is not a super-packet stays one datagram — a
// datagram whose CRC is merely wrong (one violation, as before), and any
// payload when CRC checking is off (nothing to find boundaries by).
func TestGSONotSplit(t *testing.T) {
	a := udDatagram(untagged(rdmap.OpSend, 1, 0, true, []byte("first")))
	b := udDatagram(untagged(rdmap.OpSend, 2, 0, true, []byte("second")))
	bad := append(append([]byte{}, a...), b...)
	bad[len(a)+3] ^= 0x40 // the second datagram's CRC no longer holds
	s := newSynth(t)
	s.udp(17001, 17002, bad)
	s.d.Close()
	if v := s.findings(KindViolation); len(v) != 1 || !strings.Contains(v[0], "CRC error") {
		t.Fatalf("violations %q, want one CRC error", v)
	}
	if segs := s.segments(); len(segs) != 1 || segs[0].GSO != nil {
		t.Fatalf("segments %+v", segs)
	}

	cfg := DefaultConfig()
	cfg.DatagramCRC = false
	var evs []*Event
	s2 := newSynth(t)
	s2.d = NewDecoder(cfg, func(e *Event) { evs = append(evs, e) })
	s2.udp(17001, 17002, append(append([]byte{}, a...), b...))
	for _, e := range evs {
		if e.GSO != nil {
			t.Fatalf("split with CRC checking off: %+v", e)
		}
	}
}
