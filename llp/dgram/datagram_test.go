package dgram

import (
	"bytes"
	"errors"
	"testing"

	"github.com/iwarpd/iwarpd/ddp"
	"github.com/iwarpd/iwarpd/iwerr"
	"github.com/iwarpd/iwarpd/llp"
	"github.com/iwarpd/iwarpd/rdmap"
)

func parser(rd bool) func([]byte, bool) (Datagram, error) {
	if rd {
		return ParseRD
	}
	return ParseUD
}

func TestParseGoldenFields(t *testing.T) {
	d, err := ParseUD(mustHex(t, goldens[0].hex), true)
	if err != nil {
		t.Fatal(err)
	}
	h, n, err := ddp.Parse(d.Segment)
	if err != nil || h.Tagged || !h.Last || h.QN != 0 || h.MSN != 1 || h.MO != 0 ||
		rdmap.Control(h.ULPControl).Opcode() != rdmap.OpSend || string(d.Segment[n:]) != "hello iwarp" {
		t.Fatalf("segment %+v %q err %v", h, d.Segment[n:], err)
	}
	if d.HasRD || d.CRC != 0x9840f704 || d.Keys != goldenKeys || d.ComputedCRC != d.CRC || !d.CRCValid {
		t.Fatalf("datagram %+v", d)
	}

	d, err = ParseRD(mustHex(t, goldens[3].hex), true)
	if err != nil || !d.HasRD || d.RD != goldenRDData || len(d.Segment) != 20 {
		t.Fatalf("rd data: %+v %v", d, err)
	}
	d, err = ParseRD(mustHex(t, goldens[4].hex), true)
	if err != nil || d.RD != goldenRDAck || len(d.Segment) != 0 {
		t.Fatalf("rd ack: %+v %v", d, err)
	}
}

func TestRoundTrip(t *testing.T) {
	payload := bytes.Repeat([]byte("0123456789abcdef"), 8)
	segments := [][][]byte{
		{untagged(rdmap.OpSend, true, 0, 1, 0)},
		{untagged(rdmap.OpSend, false, 0, 77, 1400), payload},
		{tagged(rdmap.OpWrite, true, 0xdeadbeef, 1<<40), payload[:3]},
		{tagged(rdmap.OpWriteRecord, true, 1, 0), (&rdmap.WriteRecord{RecordID: 1, MessageLength: 5}).Append(nil), payload[:5]},
		{untagged(rdmap.OpReadRequest, true, 1, 3, 0), make([]byte, rdmap.ReadRequestLen)},
	}
	for i, pieces := range segments {
		seg := bytes.Join(pieces, nil)
		for _, crc := range []bool{true, false} {
			for _, rd := range []bool{false, true} {
				var b []byte
				prefix := []byte{0xaa, 0xbb} // Append must keep what dst holds
				if rd {
					b = AppendRD(bytes.Clone(prefix), goldenKeys, &goldenRDData, crc, pieces...)
				} else {
					b = AppendUD(bytes.Clone(prefix), goldenKeys, crc, pieces...)
				}
				if !bytes.Equal(b[:2], prefix) {
					t.Fatalf("case %d: prefix clobbered", i)
				}
				b = b[2:]
				d, err := parser(rd)(b, crc)
				if err != nil {
					t.Fatalf("case %d crc=%v rd=%v: %v", i, crc, rd, err)
				}
				if !bytes.Equal(d.Segment, seg) || d.CRCValid != crc || d.HasRD != rd {
					t.Fatalf("case %d crc=%v rd=%v: %+v", i, crc, rd, d)
				}
				if rd && d.RD != goldenRDData {
					t.Fatalf("case %d: RD %+v", i, d.RD)
				}
				if !crc && d.CRC != 0 {
					t.Fatalf("case %d: CRC off must send 0, sent %#x", i, d.CRC)
				}
				// Segment aliases the input.
				if len(d.Segment) > 0 && &d.Segment[0] != &b[len(b)-4-len(seg)] {
					t.Fatalf("case %d: Segment does not alias the input", i)
				}
				// The gather helpers agree with the encoder.
				covered := append([][]byte{goldenKeys.Append(nil)}, pieces...)
				if rd {
					covered = append([][]byte{goldenKeys.Append(nil), goldenRDData.Append(nil)}, pieces...)
				}
				if d.Keys != goldenKeys || d.CheckQKey(goldenKeys.QKey) != nil || !errors.Is(d.CheckQKey(goldenKeys.SrcQKey), ErrQKey) {
					t.Fatalf("case %d: keys %+v", i, d.Keys)
				}
				if tr := AppendTrailer(nil, crc, covered...); !bytes.Equal(tr, b[len(b)-4:]) {
					t.Fatalf("case %d: AppendTrailer %x, datagram trailer %x", i, tr, b[len(b)-4:])
				}
			}
		}
	}
}

func TestTruncation(t *testing.T) {
	for _, g := range goldens {
		full := mustHex(t, g.hex)
		// Without the CRC a prefix that still holds the framing is
		// indistinguishable from a shorter datagram: UDP keeps datagram
		// boundaries and the socket layer drops truncated reads
		// (MSG_TRUNC), so only the framing minimum is judged then.
		minimum := KeyHeaderLen + MinSegment + 4
		if g.rd {
			minimum = KeyHeaderLen + RDHeaderLen + 4
			if full[KeyHeaderLen]&0x0f == byte(RDData) {
				minimum += MinSegment
			}
		}
		for i := 0; i < len(full); i++ {
			if _, err := parser(g.rd)(full[:i], true); err == nil {
				t.Fatalf("%s: prefix %d parsed with CRC checking", g.name, i)
			}
			_, err := parser(g.rd)(full[:i], false)
			if i < minimum && err == nil {
				t.Fatalf("%s: prefix %d (< framing minimum %d) parsed without CRC checking", g.name, i, minimum)
			}
		}
	}
}

func TestFramingErrors(t *testing.T) {
	ack := AppendRD(nil, goldenKeys, &goldenRDAck, true)
	ackWithData := AppendRD(nil, goldenKeys, &goldenRDAck, true, []byte{1, 2, 3})
	dataNoSeg := AppendRD(nil, goldenKeys, &goldenRDData, true)
	dataShortSeg := AppendRD(nil, goldenKeys, &goldenRDData, true, untagged(rdmap.OpSend, true, 0, 1, 0)[:MinSegment-1])
	udShort := AppendUD(nil, goldenKeys, true, untagged(rdmap.OpSend, true, 0, 1, 0)[:MinSegment-1])
	// 14..17 octets of an untagged header pass the framing: whether the
	// header the T bit announces is complete is the DDP receive path's to
	// judge (ddp.Parse), not the LLP's.
	udUntaggedPartial := AppendUD(nil, goldenKeys, true, untagged(rdmap.OpSend, true, 0, 1, 0)[:17])
	badVersion := goldenRDData
	badVersion.Version = 2
	badType := goldenRDData
	badType.Type = 3
	tests := []struct {
		name string
		rd   bool
		b    []byte
		want error
	}{
		{"ack ok", true, ack, nil},
		{"ack with data", true, ackWithData, ErrBadType},
		{"data without segment", true, dataNoSeg, ErrTruncated},
		{"data with short segment", true, dataShortSeg, ErrTruncated},
		{"ud short segment", false, udShort, ErrTruncated},
		{"ud partial untagged header passes framing", false, udUntaggedPartial, nil},
		{"rd version", true, AppendRD(nil, goldenKeys, &badVersion, true, untagged(rdmap.OpSend, true, 0, 1, 0)), ErrVersion},
		{"rd type", true, AppendRD(nil, goldenKeys, &badType, true, untagged(rdmap.OpSend, true, 0, 1, 0)), ErrBadType},
		{"ud zero crc with checking on", false, AppendUD(nil, goldenKeys, false, untagged(rdmap.OpSend, true, 0, 1, 0)), ErrBadCRC},
		{"empty", false, nil, ErrTruncated},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := parser(tt.rd)(tt.b, true)
			if !errors.Is(err, tt.want) || (tt.want == nil) != (err == nil) {
				t.Fatalf("err = %v, want %v", err, tt.want)
			}
		})
	}
}

// Every single-bit flip of every golden is caught by the CRC, and reported
// as ErrBadCRC (the CRC is judged before the framing).
func TestCRCBitFlips(t *testing.T) {
	for _, g := range goldens {
		full := mustHex(t, g.hex)
		for i := 0; i < len(full)*8; i++ {
			b := bytes.Clone(full)
			b[i/8] ^= 1 << (i % 8)
			d, err := parser(g.rd)(b, true)
			if !errors.Is(err, ErrBadCRC) {
				t.Fatalf("%s: bit %d: err = %v, want ErrBadCRC", g.name, i, err)
			}
			if d.CRCValid || d.Segment != nil || d.ComputedCRC == d.CRC {
				t.Fatalf("%s: bit %d: datagram %+v", g.name, i, d)
			}
			if e, ok := LLPError(err); !ok || e != iwerr.MPACRCError {
				t.Fatalf("LLPError(%v) = %v, %v", err, e, ok)
			}
			// With checking off the flip goes through (or fails framing only).
			if _, err := parser(g.rd)(b, false); errors.Is(err, ErrBadCRC) {
				t.Fatalf("%s: bit %d: CRC checked although off", g.name, i)
			}
		}
	}
	if _, ok := LLPError(ErrTruncated); ok {
		t.Error("LLPError(ErrTruncated) has a triple")
	}
}

func TestFraming(t *testing.T) {
	tests := []struct {
		size int
		rd   bool
		want int
	}{
		{DefaultDatagramSize, false, 1460},
		{DefaultDatagramSize, true, 1436},
		{0, false, 0},
		{35, true, 0},
		{36, true, 0},
		{37, true, 1},
		{MaxDatagramSize, false, 65495},
	}
	for _, tt := range tests {
		if got := MaxSegment(tt.size, tt.rd); got != tt.want {
			t.Errorf("MaxSegment(%d, %v) = %d, want %d", tt.size, tt.rd, got, tt.want)
		}
	}
	var tr llp.Transport = Framing{DatagramSize: 9000, RD: true}
	if tr.MaxSegment() != 9000-36 {
		t.Errorf("Framing{9000, RD}.MaxSegment() = %d", tr.MaxSegment())
	}
	if (Framing{}).MaxSegment() != 1460 {
		t.Errorf("Framing{} = %d, want default 1460", (Framing{}).MaxSegment())
	}
	if DefaultDatagramSize != 1500-20-8 || MaxDatagramSize != 65535-28 {
		t.Error("datagram size constants")
	}
}

func TestPortRanges(t *testing.T) {
	if DefaultUDPorts != (PortRange{17000, 17499}) || DefaultRDPorts != (PortRange{17500, 17999}) {
		t.Fatalf("defaults %v %v", DefaultUDPorts, DefaultRDPorts)
	}
	for _, p := range []uint16{17000, 17250, 17499} {
		if !DefaultUDPorts.Contains(p) || DefaultRDPorts.Contains(p) {
			t.Errorf("port %d", p)
		}
	}
	for _, p := range []uint16{17500, 17999} {
		if DefaultUDPorts.Contains(p) || !DefaultRDPorts.Contains(p) {
			t.Errorf("port %d", p)
		}
	}
	for _, p := range []uint16{0, 16999, 18000, 65535} {
		if DefaultUDPorts.Contains(p) || DefaultRDPorts.Contains(p) {
			t.Errorf("port %d", p)
		}
	}
	if DefaultUDPorts.Len() != 500 || (PortRange{5, 4}).Len() != 0 || (PortRange{0, 65535}).Len() != 65536 {
		t.Error("Len")
	}
}

func fuzzDatagram(t *testing.T, b []byte, rd bool) {
	for _, check := range []bool{true, false} {
		d, err := parser(rd)(b, check)
		if err != nil {
			continue
		}
		if d.CRCValid != check {
			t.Fatalf("CRCValid %v with check %v", d.CRCValid, check)
		}
		var re []byte
		if rd {
			if d.RD.Type == RDData && len(d.Segment) < ddp.HeaderLen(d.Segment) {
				t.Fatalf("short segment accepted")
			}
			re = AppendRD(nil, d.Keys, &d.RD, check, d.Segment)
		} else {
			re = AppendUD(nil, d.Keys, check, d.Segment)
		}
		if check && !bytes.Equal(re, b) {
			t.Fatalf("round trip:\n got %x\nwant %x", re, b)
		}
		if !check && !bytes.Equal(re[:len(re)-4], b[:len(b)-4]) {
			t.Fatalf("round trip (no CRC):\n got %x\nwant %x", re, b)
		}
	}
}

func FuzzParseUD(f *testing.F) {
	for _, g := range goldens {
		if !g.rd {
			f.Add(g.build())
		}
	}
	f.Add(AppendUD(nil, goldenKeys, false, tagged(rdmap.OpWrite, true, 1, 0)))
	f.Fuzz(func(t *testing.T, b []byte) { fuzzDatagram(t, b, false) })
}

func FuzzParseRD(f *testing.F) {
	for _, g := range goldens {
		if g.rd {
			f.Add(g.build())
		}
	}
	f.Add(AppendRD(nil, goldenKeys, &goldenRDData, false, tagged(rdmap.OpWriteRecord, true, 1, 0)))
	f.Fuzz(func(t *testing.T, b []byte) { fuzzDatagram(t, b, true) })
}
