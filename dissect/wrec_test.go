package dissect

import (
	"bytes"
	"strings"
	"testing"

	"github.com/google/gopacket"

	"github.com/iwarpd/iwarpd/llp/dgram"
	"github.com/iwarpd/iwarpd/rdmap"
)

// wrecImmSeg is a Write-Record with Immediate segment (opcode 0xD) of
// record id: payload at message offset off of a message of mlen octets
// based at TO 0x10000 of STag 0x12300.
func wrecImmSeg(id, mlen, off uint32, imm rdmap.ImmediateData, payload string) []byte {
	w := rdmap.WriteRecordImm{WriteRecord: rdmap.WriteRecord{RecordID: id, MessageLength: mlen, MessageOffset: off}, Imm: imm}
	last := off+uint32(len(payload)) == mlen
	return tagged(rdmap.OpWriteRecordImm, 0x12300, 0x10000+uint64(off), last, append(w.Append(nil), payload...))
}

// TestWriteRecordImmLayers: the gopacket layers decode a UD Write-Record
// with Immediate (Write-Record header and Immediate Data both, the payload
// after them) and serialize it back byte for byte.
func TestWriteRecordImmLayers(t *testing.T) {
	seg := wrecImmSeg(9, 12, 6, rdmap.MakeImmediateData(0xcafef00d), "world!")
	ud := udDatagram(seg)
	p := gopacket.NewPacket(ud, LayerTypeDatagramUD, gopacket.Default)
	want := []gopacket.LayerType{LayerTypeDatagramUD, LayerTypeDDP, LayerTypeRDMAP, gopacket.LayerTypePayload}
	if got := layerTypes(p); !equalTypes(got, want) {
		t.Fatalf("layers %v, want %v (%v)", got, want, p.ErrorLayer())
	}
	r := p.Layer(LayerTypeRDMAP).(*RDMAP)
	if !r.HasWriteRecord || !r.HasImmediate || r.Immediate.Value() != 0xcafef00d || r.WriteRecord.RecordID != 9 ||
		r.WriteRecord.MessageLength != 12 || r.WriteRecord.MessageOffset != 6 || string(r.Payload) != "world!" ||
		len(r.Contents) != rdmap.WriteRecordImmLen {
		t.Fatalf("RDMAP %+v", r)
	}
	buf := gopacket.NewSerializeBuffer()
	l := p.Layer(LayerTypeDDP).(*DDP)
	if err := gopacket.SerializeLayers(buf, gopacket.SerializeOptions{}, &DatagramUD{CheckCRC: true, Datagram: dgram.Datagram{Keys: testKeys}},
		l, r, gopacket.Payload("world!")); err != nil || !bytes.Equal(buf.Bytes(), ud) {
		t.Fatalf("serialize: %v\n% x\n% x", err, buf.Bytes(), ud)
	}
}

// TestWriteRecordImmStrict: a valid two-segment Write-Record with
// Immediate decodes with no finding (value and record in the events and
// the text); each malformed one is named.
func TestWriteRecordImmStrict(t *testing.T) {
	imm := rdmap.MakeImmediateData(0xa1b2c3d4)
	s := newSynth(t)
	s.udp(17001, 17002, udDatagram(wrecImmSeg(3, 10, 0, imm, "hello")))
	s.udp(17001, 17002, udDatagram(wrecImmSeg(3, 10, 5, imm, "world")))
	h := dgram.RDHeader{Version: dgram.RDVersion, Type: dgram.RDData, Seq: 1}
	s.udp(17500, 17501, dgram.AppendRD(nil, testKeys, &h, true, wrecImmSeg(4, 2, 0, imm, "rd")))
	s.d.Close()
	segs := s.segments()
	if v := s.findings(KindViolation); len(v) != 0 || len(segs) != 3 {
		t.Fatalf("violations %q, %d segments", v, len(segs))
	}
	for _, e := range segs {
		if e.RDMAP == nil || e.RDMAP.Immediate == nil || e.RDMAP.Immediate.Value != 0xa1b2c3d4 || e.RDMAP.WriteRecord == nil ||
			e.RDMAP.Name != "RDMA Write-Record with Immediate" {
			t.Fatalf("event %+v", e.RDMAP)
		}
	}
	if txt := FormatText(segs[1], false); !strings.Contains(txt, "record=3 msg_len=10 msg_off=5") || !strings.Contains(txt, "imm=0xa1b2c3d4") {
		t.Errorf("text %q", txt)
	}

	nonzero := imm
	nonzero.Raw[7] = 1
	short := wrecImmSeg(5, 0, 0, imm, "")
	cases := []struct {
		name string
		seg  []byte
		port uint16
		want string
	}{
		{"beyond the message", wrecImmSeg(6, 4, 2, imm, "abc"), 17001, "beyond its Message Length 4"},
		{"L on a middle segment", tagged(rdmap.OpWriteRecordImm, 1, 0x10000, true,
			append((&rdmap.WriteRecordImm{WriteRecord: rdmap.WriteRecord{RecordID: 7, MessageLength: 9}, Imm: imm}).Append(nil), "abc"...)),
			17001, "L=true on a segment ending at offset 3 of 9"},
		{"octets 4-7", wrecImmSeg(8, 1, 0, nonzero, "x"), 17001, "octets 4-7 are 00000001"},
		{"truncated Immediate Data", short[:len(short)-3], 17001, "malformed RDMAP header"},
		{"on RC", nil, 0, "datagram-profile opcode"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			s := newSynth(t)
			if tc.seg == nil {
				c := s.conn(1460)
				c.negotiate(rev2(false, true, enh), rev2(true, false, enh))
				c.bytes(0, c.fpdu(0, wrecImmSeg(1, 1, 0, imm, "x")))
			} else {
				s.udp(tc.port, tc.port+1, udDatagram(tc.seg))
			}
			s.d.Close()
			v := s.findings(KindViolation)
			for _, m := range v {
				if strings.Contains(m, tc.want) {
					return
				}
			}
			t.Fatalf("violations %q, want one with %q", v, tc.want)
		})
	}
}
