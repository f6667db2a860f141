package dissect

import (
	"bytes"
	"encoding/binary"
	"net"
	"sort"
	"time"

	"github.com/google/gopacket/layers"

	"github.com/iwarpd/iwarpd/mpa"
	"github.com/iwarpd/iwarpd/rdmap"
)

// MPA phases of one TCP direction.
type phase int

const (
	phaseStart      phase = iota // no payload yet: looking for a Request or Reply
	phaseAwaitReply              // initiator side: Request sent, Reply not yet seen
	phaseAwaitFrame              // responder side: Request seen, waiting for its Reply
	phaseFPDU                    // full operation: FPDUs
	phaseRejected                // the Reply rejected the connection
	phaseIgnore                  // not MPA, or no longer decodable
)

// tcpConn is one TCP connection (both directions) and its MPA negotiation.
type tcpConn struct {
	key       string
	dirs      [2]*tcpDir // dirs[0] is the direction seen first
	initiator int        // index of the MPA initiator direction, -1 before the Request
	req, rep  MPAFrame
	rtr       rtrKind // P2P RTR the initiator must send first
}

type rtrKind int

const (
	rtrNone rtrKind = iota
	rtrSend
	rtrWrite
	rtrRead
)

// chunk maps stream offsets to the frame that carried them.
type chunk struct {
	end   uint64
	frame int
	ts    time.Time
}

// tcpDir is one direction of a connection.
type tcpDir struct {
	conn     *tcpConn
	idx      int
	src, dst string
	re       reassembler
	mss      int // MSS option from this direction's SYN (what this side receives)
	synSeen  bool
	fin      bool
	phase    phase
	buf      []byte
	pos      uint64 // stream offset of buf[0]
	chunks   []chunk
	origin   uint64 // marker origin (first octet after the Request/Reply)
	crc      bool
	markers  bool
	check    *checker
	sentFPDU bool
	mulNoted bool
}

func (d *Decoder) tcp(src, dst net.IP, t *layers.TCP) {
	s, r := endpoint(src, uint16(t.SrcPort)), endpoint(dst, uint16(t.DstPort))
	key := s + "|" + r
	if r < s {
		key = r + "|" + s
	}
	c := d.conns[key]
	if c == nil {
		c = &tcpConn{key: key, initiator: -1}
		d.conns[key] = c
	}
	dir := c.dir(d, s, r)
	if t.SYN {
		dir.synSeen = true
		dir.re.syn(t.Seq)
		for _, o := range t.Options {
			if o.OptionType == layers.TCPOptionKindMSS && len(o.OptionData) == 2 {
				dir.mss = int(binary.BigEndian.Uint16(o.OptionData))
			}
		}
	}
	if len(t.Payload) > 0 {
		dir.re.segment(t.Seq, t.Payload, d.frame)
	}
	if t.FIN || t.RST {
		dir.fin = true
	}
}

func (c *tcpConn) dir(d *Decoder, src, dst string) *tcpDir {
	for _, x := range c.dirs {
		if x != nil && x.src == src {
			return x
		}
	}
	i := 0
	if c.dirs[0] != nil {
		i = 1
	}
	x := &tcpDir{conn: c, idx: i, src: src, dst: dst, check: newChecker(false)}
	x.re = reassembler{max: d.cfg.MaxBuffered,
		onData: func(b []byte, frame int) { x.data(d, b, frame) },
		onGap:  func(n uint32, frame int) { x.gap(d, n, frame) }}
	c.dirs[i] = x
	if o := c.dirs[1-i]; o != nil {
		x.check.peer, o.check.peer = o.check, x.check
	}
	return x
}

func (c *tcpConn) other(x *tcpDir) *tcpDir { return c.dirs[1-x.idx] }

func (c *tcpConn) close(d *Decoder) {
	for _, x := range c.dirs {
		if x == nil {
			continue
		}
		x.re.flush(d.frame)
		x.process(d)
		if len(x.buf) > 0 && (x.phase == phaseFPDU || x.phase == phaseStart || x.phase == phaseAwaitFrame) {
			d.note(x.lastFrame(), "%s > %s: %d octets at the end of the capture do not complete a frame", x.src, x.dst, len(x.buf))
		}
		d.report(x.lastFrame(), x.check.finish())
	}
}

func (x *tcpDir) lastFrame() int {
	if n := len(x.chunks); n > 0 {
		return x.chunks[n-1].frame
	}
	return 0
}

func (x *tcpDir) data(d *Decoder, b []byte, frame int) {
	if x.phase == phaseIgnore {
		x.pos += uint64(len(b))
		return
	}
	x.buf = append(x.buf, b...)
	x.chunks = append(x.chunks, chunk{end: x.pos + uint64(len(x.buf)), frame: frame, ts: d.ts})
	x.process(d)
}

func (x *tcpDir) gap(d *Decoder, n uint32, frame int) {
	if x.phase != phaseIgnore {
		d.violation(frame, "%s > %s: %d octets missing from the capture; direction no longer decoded", x.src, x.dst, n)
	}
	x.stop()
}

func (x *tcpDir) stop() {
	x.phase = phaseIgnore
	x.pos += uint64(len(x.buf))
	x.buf, x.chunks = nil, nil
}

// consume drops n decoded octets and returns the frame and time of the
// packet that carried the last of them.
func (x *tcpDir) consume(n int) (int, time.Time) {
	end := x.pos + uint64(n)
	fr, ts := 0, time.Time{}
	for _, c := range x.chunks {
		if c.end >= end {
			fr, ts = c.frame, c.ts
			break
		}
	}
	x.buf = x.buf[n:]
	x.pos = end
	i := 0
	for i < len(x.chunks) && x.chunks[i].end <= end {
		i++
	}
	x.chunks = x.chunks[i:]
	if len(x.buf) == 0 {
		x.buf = x.buf[:0:0]
	}
	return fr, ts
}

var (
	keyReq = []byte(mpa.KeyRequest)
	keyRep = []byte(mpa.KeyReply)
)

func prefixOf(b, key []byte) bool {
	n := min(len(b), len(key))
	return bytes.Equal(b[:n], key[:n])
}

// process decodes as much of the buffered stream as is complete.
func (x *tcpDir) process(d *Decoder) {
	for len(x.buf) > 0 {
		switch x.phase {
		case phaseStart:
			if !prefixOf(x.buf, keyReq) && !prefixOf(x.buf, keyRep) {
				x.stop() // not MPA (as Wireshark's heuristic)
				return
			}
			if len(x.buf) < len(keyReq) {
				return
			}
			if !x.frame(d) {
				return
			}
		case phaseAwaitFrame:
			if !prefixOf(x.buf, keyRep) {
				d.violation(x.chunks[0].frame, "%s > %s: expected an MPA Reply", x.src, x.dst)
				x.stop()
				return
			}
			if len(x.buf) < len(keyRep) || !x.frame(d) {
				return
			}
		case phaseAwaitReply:
			if len(x.buf) > d.cfg.MaxBuffered {
				d.violation(x.lastFrame(), "%s > %s: %d octets sent before any MPA Reply", x.src, x.dst, len(x.buf))
				x.stop()
			}
			return
		case phaseFPDU:
			if !x.fpdu(d) {
				return
			}
		case phaseRejected:
			fr, _ := x.consume(0)
			d.violation(fr, "%s > %s: data after a rejected MPA Reply", x.src, x.dst)
			x.stop()
			return
		default:
			x.stop()
			return
		}
	}
}

// frame decodes an MPA Request or Reply; false means wait for more data.
func (x *tcpDir) frame(d *Decoder) bool {
	var m MPAFrame
	err := m.DecodeFromBytes(x.buf, nil)
	if isMPATruncated(err) {
		return false
	}
	c := x.conn
	if err != nil {
		fr, _ := x.consume(0)
		d.violation(fr, "%s > %s: malformed MPA frame: %v", x.src, x.dst, err)
		x.stop()
		return false
	}
	fr, ts := x.consume(len(m.Contents))
	x.origin = x.pos
	e := d.event(KindMPARequest)
	e.Frame, e.Timestamp, e.Time = fr, ts, ts.Sub(d.first).Seconds()
	e.Src, e.Dst, e.LLP, e.MPA = x.src, x.dst, LLPMPA, mpaInfo(&m)
	if m.Frame.Reply {
		e.Kind = KindMPAReply
	}
	if !m.Frame.Reply {
		if c.initiator >= 0 {
			d.emit(e)
			d.violation(fr, "%s > %s: second MPA Request on a connection", x.src, x.dst)
			x.stop()
			return false
		}
		d.emit(e)
		d.report(fr, checkFrame(&m))
		c.initiator, c.req = x.idx, m
		x.phase = phaseAwaitReply
		if o := c.other(x); o != nil && o.phase == phaseStart {
			o.phase = phaseAwaitFrame
		}
		return true
	}
	if c.initiator < 0 || c.initiator == x.idx {
		d.emit(e)
		d.note(fr, "%s > %s: MPA Reply without a Request in the capture; connection not decoded", x.src, x.dst)
		x.stop()
		return false
	}
	d.emit(e)
	d.report(fr, checkFrame(&m))
	c.rep = m
	ini := c.other(x)
	fs, rtr := checkNegotiation(&c.req, &c.rep)
	d.report(fr, fs)
	c.rtr = rtr
	if m.Frame.Reject {
		x.phase, ini.phase = phaseRejected, phaseRejected
		ini.process(d)
		return true
	}
	crc := c.req.Frame.CRC || c.rep.Frame.CRC
	x.phase, x.crc, x.markers = phaseFPDU, crc, c.req.Frame.Markers // responder→initiator carries markers iff Request.M
	ini.phase, ini.crc, ini.markers = phaseFPDU, crc, c.rep.Frame.Markers
	ini.process(d)
	return true
}

// fpdu decodes one FPDU; false means wait for more data.
func (x *tcpDir) fpdu(d *Decoder) bool {
	l := MPAFPDU{CRCEnabled: x.crc, MarkersEnabled: x.markers, StreamPos: x.pos - x.origin}
	err := l.DecodeFromBytes(x.buf, nil)
	if isMPATruncated(err) {
		return false
	}
	if err != nil {
		fr, _ := x.consume(0)
		d.violation(fr, "%s > %s: malformed FPDU: %v; direction no longer decoded", x.src, x.dst, err)
		x.stop()
		return false
	}
	fr, ts := x.consume(l.FPDU.WireLen)
	e := d.event(KindSegment)
	e.Frame, e.Timestamp, e.Time = fr, ts, ts.Sub(d.first).Seconds()
	e.Src, e.Dst, e.LLP = x.src, x.dst, LLPMPA
	f := &l.FPDU
	e.FPDU = &FPDUInfo{ULPDULen: f.ULPDULength, WireLen: f.WireLen, PadLen: f.PadLen, Markers: len(f.Markers),
		StreamPos: l.StreamPos, CRC: f.CRC}
	var fs []finding
	switch {
	case !x.crc:
		e.CRC = "off"
	case f.CRCValid:
		e.CRC = "ok"
	default:
		e.CRC = "bad"
		fs = append(fs, violationf("MPA CRC error: wire 0x%08x, computed 0x%08x", f.CRC, f.ComputedCRC))
	}
	if !f.PadZero {
		fs = append(fs, violationf("MPA pad octets not zero"))
	}
	if d.cfg.SkipMULPDU {
		// not checked (Config.SkipMULPDU)
	} else if o := x.conn.other(x); o != nil && o.synSeen && o.mss > 0 {
		if mul := mpa.MULPDU(o.mss, x.markers); f.ULPDULength > mul {
			fs = append(fs, violationf("ULPDU_Length %d exceeds MULPDU %d (peer MSS %d)", f.ULPDULength, mul, o.mss))
		}
	} else if !x.mulNoted {
		x.mulNoted = true
		fs = append(fs, notef("%s > %s: no SYN with an MSS option from the peer: MULPDU not checked", x.src, x.dst))
	}
	seg := decodeSegment(e, f.ULPDU, LLPMPA)
	fs = append(fs, seg.findings...)
	c := x.conn
	if seg.ok {
		if !x.sentFPDU {
			fs = append(fs, c.firstFPDU(x, &seg)...)
		}
		fs = append(fs, x.check.segment(&seg)...)
	}
	x.sentFPDU = true
	d.emit(e)
	d.report(fr, fs)
	return true
}

// firstFPDU checks RFC 5044 §7.1.2 (the responder receives before it
// sends) and the RFC 6581 RTR of peer-to-peer mode.
func (c *tcpConn) firstFPDU(x *tcpDir, s *segment) []finding {
	if x.idx != c.initiator {
		if ini := c.other(x); ini != nil && !ini.sentFPDU {
			return []finding{violationf("responder sent an FPDU before receiving the initiator's first FPDU")}
		}
		return nil
	}
	if c.rtr == rtrNone {
		return nil
	}
	op := s.rdmap.Opcode()
	ok := false
	switch c.rtr {
	case rtrWrite:
		ok = op == rdmap.OpWrite && len(s.rdmap.Payload) == 0
	case rtrRead:
		ok = op == rdmap.OpReadRequest && s.rdmap.HasReadRequest && s.rdmap.ReadRequest.Size == 0
	case rtrSend:
		ok = op == rdmap.OpSend && len(s.rdmap.Payload) == 0
	}
	if !ok {
		return []finding{violationf("peer-to-peer: the initiator's first FPDU is not the negotiated zero-length RTR")}
	}
	s.event.RDMAP.RTR = true
	return nil
}

func sortedConns(m map[string]*tcpConn) []*tcpConn {
	out := make([]*tcpConn, 0, len(m))
	for _, c := range m {
		out = append(out, c)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].key < out[j].key })
	return out
}
