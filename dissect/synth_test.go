package dissect

import (
	"encoding/binary"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/google/gopacket"
	"github.com/google/gopacket/layers"

	"github.com/iwarpd/iwarpd/ddp"
	"github.com/iwarpd/iwarpd/llp/dgram"
	"github.com/iwarpd/iwarpd/mpa"
	"github.com/iwarpd/iwarpd/rdmap"
)

// synth feeds synthetic packets, built with gopacket serialization, into a
// Decoder and collects its events.
type synth struct {
	t      testing.TB
	d      *Decoder
	events []*Event
	frame  int
}

func newSynth(t testing.TB) *synth {
	s := &synth{t: t}
	s.d = NewDecoder(DefaultConfig(), func(e *Event) { s.events = append(s.events, e) })
	return s
}

var (
	cliIP = net.IPv4(10, 0, 0, 1)
	srvIP = net.IPv4(10, 0, 0, 2)
)

func ethIPv4(src, dst net.IP, proto layers.IPProtocol) (*layers.Ethernet, *layers.IPv4) {
	eth := &layers.Ethernet{SrcMAC: net.HardwareAddr{2, 0, 0, 0, 0, 1}, DstMAC: net.HardwareAddr{2, 0, 0, 0, 0, 2}, EthernetType: layers.EthernetTypeIPv4}
	ip := &layers.IPv4{Version: 4, TTL: 64, Protocol: proto, SrcIP: src, DstIP: dst}
	return eth, ip
}

func (s *synth) feed(ls ...gopacket.SerializableLayer) {
	s.t.Helper()
	buf := gopacket.NewSerializeBuffer()
	if err := gopacket.SerializeLayers(buf, gopacket.SerializeOptions{FixLengths: true, ComputeChecksums: true}, ls...); err != nil {
		s.t.Fatal(err)
	}
	s.frame++
	data := buf.Bytes()
	ci := gopacket.CaptureInfo{Timestamp: time.Unix(1000, int64(s.frame)*1000), CaptureLength: len(data), Length: len(data)}
	s.d.Packet(s.frame, ci, data, layers.LinkTypeEthernet)
}

func (s *synth) udp(srcPort, dstPort uint16, payload []byte) {
	eth, ip := ethIPv4(cliIP, srvIP, layers.IPProtocolUDP)
	u := &layers.UDP{SrcPort: layers.UDPPort(srcPort), DstPort: layers.UDPPort(dstPort)}
	u.SetNetworkLayerForChecksum(ip)
	s.feed(eth, ip, u, gopacket.Payload(payload))
}

// tcpSim is one TCP connection between cliIP:40000 and srvIP:7174.
type tcpSim struct {
	s    *synth
	seq  [2]uint32 // next sequence number: [0] client, [1] server
	crc  bool
	send [2]*mpa.Sender
}

func (s *synth) conn(mss uint16) *tcpSim {
	c := &tcpSim{s: s, seq: [2]uint32{1000, 5000}}
	if mss > 0 {
		c.raw(0, c.seq[0], nil, func(t *layers.TCP) { t.SYN = true; t.Options = mssOpt(mss) })
		c.raw(1, c.seq[1], nil, func(t *layers.TCP) { t.SYN, t.ACK = true, true; t.Options = mssOpt(mss) })
		c.seq[0]++
		c.seq[1]++
	}
	return c
}

func mssOpt(mss uint16) []layers.TCPOption {
	return []layers.TCPOption{{OptionType: layers.TCPOptionKindMSS, OptionLength: 4, OptionData: binary.BigEndian.AppendUint16(nil, mss)}}
}

// raw sends one TCP segment from side (0 client, 1 server) at seq.
func (c *tcpSim) raw(side int, seq uint32, payload []byte, mod func(*layers.TCP)) {
	src, dst, sp, dp := cliIP, srvIP, uint16(40000), uint16(7174)
	if side == 1 {
		src, dst, sp, dp = dst, src, dp, sp
	}
	eth, ip := ethIPv4(src, dst, layers.IPProtocolTCP)
	t := &layers.TCP{SrcPort: layers.TCPPort(sp), DstPort: layers.TCPPort(dp), Seq: seq, Window: 65535, ACK: true}
	if mod != nil {
		mod(t)
	}
	t.SetNetworkLayerForChecksum(ip)
	c.s.feed(eth, ip, t, gopacket.Payload(payload))
}

// bytes sends payload as the next octets of side's stream, in one segment.
func (c *tcpSim) bytes(side int, payload []byte) {
	c.raw(side, c.seq[side], payload, nil)
	c.seq[side] += uint32(len(payload))
}

// fpdu frames seg with side's MPA sender (created after negotiate).
func (c *tcpSim) fpdu(side int, seg []byte) []byte {
	return c.send[side].AppendFPDU(nil, seg)
}

// negotiate sends a Request and a Reply with the given frames.
func (c *tcpSim) negotiate(req, rep mpa.Frame) {
	c.bytes(0, req.Append(nil))
	c.bytes(1, rep.Append(nil))
	c.crc = req.CRC || rep.CRC
	c.send = [2]*mpa.Sender{mpa.NewSender(c.crc, false), mpa.NewSender(c.crc, false)}
}

func rev2(reply, crc bool, e mpa.Enhanced) mpa.Frame {
	return mpa.Frame{Reply: reply, CRC: crc, Enhanced: true, Revision: 2, PrivateData: e.Append(nil)}
}

func untagged(op rdmap.Opcode, msn, mo uint32, last bool, payload []byte) []byte {
	info, _ := op.Info()
	h := ddp.Header{Last: last, Version: ddp.Version, ULPControl: uint8(rdmap.MakeControl(op)), QN: info.QN, MSN: msn, MO: mo}
	return append(h.Append(nil), payload...)
}

func tagged(op rdmap.Opcode, stag uint32, to uint64, last bool, payload []byte) []byte {
	h := ddp.Header{Tagged: true, Last: last, Version: ddp.Version, ULPControl: uint8(rdmap.MakeControl(op)), Stag: stag, TO: to}
	return append(h.Append(nil), payload...)
}

// testKeys is the key header of the synthetic datagrams.
var testKeys = dgram.Keys{QKey: 0x11223344, SrcQKey: 0x55667788}

func udDatagram(seg []byte) []byte { return dgram.AppendUD(nil, testKeys, true, seg) }

// segments returns the segment events.
func (s *synth) segments() []*Event {
	var out []*Event
	for _, e := range s.events {
		if e.Kind == KindSegment {
			out = append(out, e)
		}
	}
	return out
}

func (s *synth) findings(kind string) []string {
	var out []string
	for _, e := range s.events {
		if e.Kind == kind {
			out = append(out, e.Message)
		}
	}
	return out
}

func (s *synth) wantNoViolations() {
	s.t.Helper()
	if v := s.findings(KindViolation); len(v) > 0 {
		s.t.Fatalf("unexpected violations:\n%s", strings.Join(v, "\n"))
	}
}
