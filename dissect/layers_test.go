package dissect

import (
	"bytes"
	"encoding/hex"
	"strings"
	"testing"

	"github.com/google/gopacket"

	"github.com/iwarpd/iwarpd/llp/dgram"
	"github.com/iwarpd/iwarpd/rdmap"
)

func unhex(t testing.TB, s string) []byte {
	t.Helper()
	b, err := hex.DecodeString(strings.ReplaceAll(s, " ", ""))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// The "hello iwarp" Send FPDU of protocol-notes §A.6 (tshark: Good CRC32).
const helloFPDU = "00 1d 41 43 00 00 00 00 00 00 00 00 00 00 00 01 00 00 00 00 68 65 6c 6c 6f 20 69 77 61 72 70 00 cf 69 6c 1e"

func layerTypes(p gopacket.Packet) []gopacket.LayerType {
	var out []gopacket.LayerType
	for _, l := range p.Layers() {
		out = append(out, l.LayerType())
	}
	return out
}

func TestFPDULayers(t *testing.T) {
	b := unhex(t, helloFPDU)
	p := gopacket.NewPacket(b, FPDUDecoder{CRC: true}, gopacket.Default)
	if err := p.ErrorLayer(); err != nil {
		t.Fatal(err.Error())
	}
	want := []gopacket.LayerType{LayerTypeMPAFPDU, LayerTypeDDP, LayerTypeRDMAP, gopacket.LayerTypePayload}
	if got := layerTypes(p); !equalTypes(got, want) {
		t.Fatalf("layers %v, want %v", got, want)
	}
	f := p.Layer(LayerTypeMPAFPDU).(*MPAFPDU)
	d := p.Layer(LayerTypeDDP).(*DDP)
	r := p.Layer(LayerTypeRDMAP).(*RDMAP)
	if !f.FPDU.CRCValid || f.FPDU.ULPDULength != 29 || f.FPDU.PadLen != 1 || d.Header.MSN != 1 || r.Opcode() != rdmap.OpSend ||
		string(p.ApplicationLayer().Payload()) != "hello iwarp" {
		t.Fatalf("decoded %+v %+v", f.FPDU, d.Header)
	}
	// Serialize DDP + payload back into an FPDU: same bytes.
	buf := gopacket.NewSerializeBuffer()
	if err := gopacket.SerializeLayers(buf, gopacket.SerializeOptions{}, &MPAFPDU{CRCEnabled: true}, d, r, gopacket.Payload("hello iwarp")); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(buf.Bytes(), b) {
		t.Fatalf("serialized % x\nwant       % x", buf.Bytes(), b)
	}
	// The registered default decoder: CRC on, no markers.
	if p := gopacket.NewPacket(b, LayerTypeMPAFPDU, gopacket.Default); p.Layer(LayerTypeRDMAP) == nil {
		t.Fatal("LayerTypeMPAFPDU decoder did not reach RDMAP")
	}
	// The Write RTR of protocol-notes §A.2: a zero-length message still
	// yields its RDMAP layer.
	rtr := gopacket.NewPacket(unhex(t, "00 0e c1 40 00 00 00 01 00 00 00 00 00 00 00 00 eb d3 4c 5f"), FPDUDecoder{CRC: true}, gopacket.Default)
	want = want[:3]
	if got := layerTypes(rtr); !equalTypes(got, want) || rtr.Layer(LayerTypeRDMAP).(*RDMAP).Opcode() != rdmap.OpWrite ||
		!rtr.Layer(LayerTypeMPAFPDU).(*MPAFPDU).FPDU.CRCValid || rtr.Layer(LayerTypeDDP).(*DDP).Header.Stag != 1 {
		t.Fatalf("Write RTR layers %v (%v)", got, rtr.ErrorLayer())
	}
	// A bad CRC decodes, with CRCValid false.
	b[len(b)-1] ^= 0xff
	p = gopacket.NewPacket(b, FPDUDecoder{CRC: true}, gopacket.Default)
	if f := p.Layer(LayerTypeMPAFPDU).(*MPAFPDU); f.FPDU.CRCValid {
		t.Fatal("bad CRC reported valid")
	}
}

func equalTypes(a, b []gopacket.LayerType) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

func TestMPAFrameLayer(t *testing.T) {
	// protocol-notes §A.1 golden Request: Rev 2, C+S, P2P, Write RTR, IRD=ORD=16.
	b := unhex(t, "4d 50 41 20 49 44 20 52 65 71 20 46 72 61 6d 65 50 02 00 04 80 10 80 10")
	p := gopacket.NewPacket(b, LayerTypeMPAFrame, gopacket.Default)
	m, ok := p.Layer(LayerTypeMPAFrame).(*MPAFrame)
	if !ok {
		t.Fatalf("no MPAFrame layer: %v", p.ErrorLayer())
	}
	if m.Frame.Reply || !m.Frame.CRC || !m.Frame.Enhanced || !m.HasEnhanced || m.Enhanced.IRD != 16 || m.Enhanced.ORD != 16 ||
		!m.Enhanced.PeerToPeer || !m.Enhanced.WriteRTR || m.Enhanced.ReadRTR {
		t.Fatalf("decoded %+v", m)
	}
	buf := gopacket.NewSerializeBuffer()
	if err := m.SerializeTo(buf, gopacket.SerializeOptions{}); err != nil || !bytes.Equal(buf.Bytes(), b) {
		t.Fatalf("serialize: %v % x", err, buf.Bytes())
	}
}

func TestDatagramLayers(t *testing.T) {
	seg := untagged(rdmap.OpSend, 1, 0, true, []byte("hello iwarp"))
	ud := udDatagram(seg)
	p := gopacket.NewPacket(ud, LayerTypeDatagramUD, gopacket.Default)
	want := []gopacket.LayerType{LayerTypeDatagramUD, LayerTypeDDP, LayerTypeRDMAP, gopacket.LayerTypePayload}
	if got := layerTypes(p); !equalTypes(got, want) {
		t.Fatalf("UD layers %v, want %v (%v)", got, want, p.ErrorLayer())
	}
	if !p.Layer(LayerTypeDatagramUD).(*DatagramUD).Datagram.CRCValid {
		t.Fatal("UD CRC not valid")
	}
	buf := gopacket.NewSerializeBuffer()
	l := p.Layer(LayerTypeDDP).(*DDP)
	if err := gopacket.SerializeLayers(buf, gopacket.SerializeOptions{}, &DatagramUD{CheckCRC: true, Datagram: dgram.Datagram{Keys: testKeys}}, l, gopacket.Payload("hello iwarp")); err != nil || !bytes.Equal(buf.Bytes(), ud) {
		t.Fatalf("UD serialize: %v\n% x\n% x", err, buf.Bytes(), ud)
	}

	h := dgram.RDHeader{Version: dgram.RDVersion, Type: dgram.RDData, Flags: dgram.FlagAck, Window: 64, Incarnation: 7, Seq: 3, CumAck: 2}
	rd := dgram.AppendRD(nil, testKeys, &h, true, seg)
	p = gopacket.NewPacket(rd, LayerTypeDatagramRD, gopacket.Default)
	want[0] = LayerTypeDatagramRD
	if got := layerTypes(p); !equalTypes(got, want) {
		t.Fatalf("RD layers %v, want %v (%v)", got, want, p.ErrorLayer())
	}
	if r := p.Layer(LayerTypeDatagramRD).(*DatagramRD); r.Datagram.RD.Seq != 3 || len(r.Contents) != dgram.KeyHeaderLen+dgram.RDHeaderLen {
		t.Fatalf("RD header %+v", r.Datagram.RD)
	}
	ack := dgram.RDHeader{Version: dgram.RDVersion, Type: dgram.RDAck, Flags: dgram.FlagAck, CumAck: 4}
	p = gopacket.NewPacket(dgram.AppendRD(nil, testKeys, &ack, true), LayerTypeDatagramRD, gopacket.Default)
	if got := layerTypes(p); len(got) != 1 || got[0] != LayerTypeDatagramRD {
		t.Fatalf("RD ACK layers %v (%v)", got, p.ErrorLayer())
	}
}

func TestDatagramDecoding(t *testing.T) {
	s := newSynth(t)
	seg := untagged(rdmap.OpSend, 1, 0, true, []byte("x"))
	s.udp(17001, 17002, udDatagram(seg))
	bad := udDatagram(untagged(rdmap.OpSend, 2, 0, true, []byte("y")))
	bad[len(bad)-1] ^= 1
	s.udp(17001, 17002, bad)
	s.udp(17001, 17002, udDatagram(tagged(rdmap.OpWrite, 1, 0, true, nil))) // RDMA Write is RC-only
	h := dgram.RDHeader{Version: dgram.RDVersion, Type: dgram.RDData, Seq: 1}
	s.udp(17500, 17501, dgram.AppendRD(nil, testKeys, &h, true, seg))
	ack := dgram.RDHeader{Version: dgram.RDVersion, Type: dgram.RDAck, Flags: dgram.FlagAck, CumAck: 2}
	s.udp(17501, 17500, dgram.AppendRD(nil, testKeys, &ack, true))
	s.udp(9999, 9998, udDatagram(seg)) // not a profile port
	s.d.Close()
	segs := s.segments()
	if len(segs) != 4 || segs[0].LLP != LLPUD || segs[0].CRC != "ok" || segs[1].CRC != "bad" || segs[3].LLP != LLPRD || segs[3].RD.Seq != 1 {
		t.Fatalf("segments %+v", segs)
	}
	if a := kindOf(s.events, KindRDAck); len(a) != 1 || a[0].RD.CumAck != 2 {
		t.Fatalf("acks %+v", a)
	}
	v := s.findings(KindViolation)
	if len(v) != 2 || !strings.Contains(v[0], "datagram CRC error") || !strings.Contains(v[1], "not allowed on UD") {
		t.Fatalf("violations %q", v)
	}
	if !strings.HasPrefix(FormatText(segs[3], false), "0.000003 10.0.0.1:17500 > 10.0.0.2:17501 RD seq=1") {
		t.Errorf("text %q", FormatText(segs[3], false))
	}
}
