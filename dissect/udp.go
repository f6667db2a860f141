package dissect

import (
	"net"

	"github.com/google/gopacket/layers"

	"github.com/iwarpd/iwarpd/llp/dgram"
)

// udp decodes a datagram-profile UDP payload when either port is in the
// configured UD or RD range.
func (d *Decoder) udp(src, dst net.IP, u *layers.UDP) {
	sp, dp := uint16(u.SrcPort), uint16(u.DstPort)
	var llp string
	switch {
	case d.cfg.UDPorts.Contains(dp) || d.cfg.UDPorts.Contains(sp):
		llp = LLPUD
	case d.cfg.RDPorts.Contains(dp) || d.cfg.RDPorts.Contains(sp):
		llp = LLPRD
	default:
		return
	}
	s, r := endpoint(src, sp), endpoint(dst, dp)
	// A GSO super-packet (gso.go): only when the UDP length covers the
	// whole payload (not a capture cut short by the snap length).
	if d.cfg.DatagramCRC && int(u.Length) == 8+len(u.Payload) {
		if size, parts := gsoSplit(u.Payload, llp == LLPRD); parts != nil {
			d.note(d.frame, "%s > %s: UDP GSO super-packet of %d octets (captured on the sending host before the kernel "+
				"segmented it): %d datagrams of %d octets, the last %d; each decoded on its own", s, r, len(u.Payload),
				len(parts), size, len(parts[len(parts)-1]))
			for i, part := range parts {
				d.datagram(s, r, llp, part, &GSOInfo{Index: i + 1, Count: len(parts), SegSize: size, Len: len(u.Payload)})
			}
			return
		}
	}
	d.datagram(s, r, llp, u.Payload, nil)
}

// datagram decodes one datagram of the UD or RD framing from s to r (a
// whole UDP payload, or one datagram of a GSO super-packet: gso set).
func (d *Decoder) datagram(s, r, llp string, payload []byte, gso *GSOInfo) {
	e := d.event(KindSegment)
	e.GSO = gso
	e.Src, e.Dst, e.LLP = s, r, llp
	var g dgram.Datagram
	if llp == LLPUD {
		l := DatagramUD{CheckCRC: d.cfg.DatagramCRC}
		if err := l.DecodeFromBytes(payload, nil); err != nil {
			d.violation(d.frame, "%s > %s: malformed UD datagram: %v", s, r, err)
			return
		}
		g = l.Datagram
	} else {
		l := DatagramRD{CheckCRC: d.cfg.DatagramCRC}
		if err := l.DecodeFromBytes(payload, nil); err != nil {
			d.violation(d.frame, "%s > %s: malformed RD datagram: %v", s, r, err)
			return
		}
		g = l.Datagram
		h := &g.RD
		e.RD = &RDInfo{Type: uint8(h.Type), Flags: uint8(h.Flags), Window: h.Window, Incarnation: h.Incarnation,
			EchoIncarnation: h.EchoedIncarnation, Seq: h.Seq, CumAck: h.CumAck, SACK: h.SACK}
	}
	e.QKey, e.SrcQKey = &g.Keys.QKey, &g.Keys.SrcQKey
	var fs []finding
	switch {
	case !d.cfg.DatagramCRC:
		e.CRC = "unchecked"
	case g.CRCValid:
		e.CRC = "ok"
	default:
		e.CRC = "bad"
		fs = append(fs, violationf("datagram CRC error: wire 0x%08x, computed 0x%08x", g.CRC, g.ComputedCRC))
	}
	if g.HasRD {
		fs = append(fs, checkRDHeader(&g.RD)...)
		if len(g.Segment) == 0 {
			e.Kind = KindRDAck
			d.emit(e)
			d.report(d.frame, fs)
			return
		}
	}
	seg := decodeSegment(e, g.Segment, llp)
	fs = append(fs, seg.findings...)
	if seg.ok {
		key := s + "|" + r
		c := d.dgrams[key]
		if c == nil {
			c = newChecker(true)
			d.dgrams[key] = c
			if p := d.dgrams[r+"|"+s]; p != nil {
				c.peer, p.peer = p, c
			}
		}
		fs = append(fs, c.segment(&seg)...)
	}
	d.emit(e)
	d.report(d.frame, fs)
}
