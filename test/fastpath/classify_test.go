package fastpath

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"testing"

	"github.com/iwarpd/iwarpd/ddp"
	"github.com/iwarpd/iwarpd/llp/dgram"
	"github.com/iwarpd/iwarpd/rdmap"
)

// The reference classifier: the rules of c/core/fastpath.h
// (iwvi_fp_rd_classify, iwvi_fp_ud_classify), written over the Go
// decoders the daemon uses (dgram.ParseKeys/ParseRD/ParseUD, ddp.Parse,
// rdmap.Control, rdmap.ParseImmediateData), in the daemon's order for the
// framing checks (verbsd/rd recv.go datagram, verbsd/ud recv.go datagram).

const (
	classDaemon = 0
	classSend   = 1
	classAck    = 2
)

// qpCfg and peerCfg are struct fp_rx_qp and struct fp_rd_peer.
type qpCfg struct {
	qkey uint32
	crc  bool
}

type peerCfg struct {
	ourInc, peerInc, rcvNext, sndUna, sndNext uint32
}

// rx is the C program's answer (struct fp_rx), field for field.
type rx struct {
	class                                  int
	reason                                 string
	qkey, srcQKey, crc                     uint32
	hasRD, rdVersion, rdType, flags        uint32
	window, inc, echoed, seq, cumAck, sack uint32
	acked, hasDDP, tagged, last, opcode    uint32
	solicited, hasImm, qn, msn, mo, imm    uint32
	payloadOff, payloadLen                 uint32
}

func parseRx(t *testing.T, s string) rx {
	t.Helper()
	f := strings.Fields(s)
	if len(f) != 28 {
		t.Fatalf("answer %q: %d fields, want 28", s, len(f))
	}
	var v [26]uint32
	for i := range v {
		n, err := strconv.ParseUint(f[i+2], 10, 32)
		if err != nil {
			t.Fatalf("answer %q: %v", s, err)
		}
		v[i] = uint32(n)
	}
	c, _ := strconv.Atoi(f[0])
	return rx{class: c, reason: f[1], qkey: v[0], srcQKey: v[1], crc: v[2], hasRD: v[3], rdVersion: v[4], rdType: v[5],
		flags: v[6], window: v[7], inc: v[8], echoed: v[9], seq: v[10], cumAck: v[11], sack: v[12], acked: v[13],
		hasDDP: v[14], tagged: v[15], last: v[16], opcode: v[17], solicited: v[18], hasImm: v[19], qn: v[20],
		msn: v[21], mo: v[22], imm: v[23], payloadOff: v[24], payloadLen: v[25]}
}

// framingDrop lists the reasons the daemon drops silently (FP_R_LAST_DROP
// and before): for them the C side's partial fields are not compared.
var framingDrop = map[string]bool{"truncated": true, "qkey": true, "crc": true, "rd-version": true, "rd-type": true}

// refRD classifies the RD datagram b as the fast path must.
func refRD(b []byte, qp qpCfg, peer *peerCfg) rx {
	var x rx
	if k, err := dgram.ParseKeys(b); err == nil {
		x.qkey, x.srcQKey = k.QKey, k.SrcQKey
		if k.QKey != qp.qkey {
			return daemon(x, "qkey")
		}
	}
	d, err := dgram.ParseRD(b, qp.crc)
	switch {
	case errors.Is(err, dgram.ErrTruncated):
		return daemon(x, "truncated")
	case errors.Is(err, dgram.ErrBadCRC):
		return daemon(x, "crc")
	case errors.Is(err, dgram.ErrVersion):
		return daemon(x, "rd-version")
	case errors.Is(err, dgram.ErrBadType):
		return daemon(x, "rd-type")
	case err != nil:
		panic(err)
	}
	h := d.RD
	x.crc, x.hasRD, x.rdVersion, x.rdType, x.flags = d.CRC, 1, uint32(h.Version), uint32(h.Type), uint32(h.Flags)
	x.window, x.inc, x.echoed, x.seq, x.cumAck, x.sack = uint32(h.Window), h.Incarnation, h.EchoedIncarnation, h.Seq, h.CumAck, h.SACK
	acked := h.Flags&dgram.FlagAck != 0
	x.acked = uint32(b2i(acked))
	bad := dgram.FlagNotReady | dgram.FlagReset | dgram.FlagSACKBlock | dgram.FlagChallenge
	switch {
	case h.Flags&bad != 0 || h.Flags&dgram.FlagExtSACK == 0 || (h.Type == dgram.RDAck && !acked):
		return daemon(x, "flags")
	case peer == nil:
		return daemon(x, "no-peer")
	case h.Incarnation != peer.peerInc:
		return daemon(x, "incarnation")
	case h.EchoedIncarnation != peer.ourInc:
		return daemon(x, "echoed")
	case h.Type == dgram.RDData && h.Seq != peer.rcvNext:
		return daemon(x, "seq")
	case acked && h.SACK != 0:
		return daemon(x, "sack")
	case acked && !(dgram.SeqLessEq(peer.sndUna, h.CumAck) && dgram.SeqLessEq(h.CumAck, peer.sndNext)):
		return daemon(x, "ack-range")
	case h.Type == dgram.RDAck:
		x.class, x.reason = classAck, "none"
		return x
	}
	return refSegment(x, d.Segment, dgram.KeyHeaderLen+dgram.RDHeaderLen)
}

// refUD classifies the UD datagram b.
func refUD(b []byte, qp qpCfg) rx {
	var x rx
	if len(b) < dgram.KeyHeaderLen+ddp.TaggedHeaderLen+4 {
		return daemon(x, "truncated")
	}
	k, _ := dgram.ParseKeys(b)
	x.qkey, x.srcQKey = k.QKey, k.SrcQKey
	if k.QKey != qp.qkey {
		return daemon(x, "qkey")
	}
	d, err := dgram.ParseUD(b, qp.crc)
	switch {
	case errors.Is(err, dgram.ErrBadCRC):
		return daemon(x, "crc")
	case err != nil:
		panic(err) // the length was checked
	}
	x.crc = d.CRC
	if d.Segment[0]&0x80 == 0 && len(d.Segment) < ddp.UntaggedHeaderLen {
		return daemon(x, "truncated")
	}
	return refSegment(x, d.Segment, dgram.KeyHeaderLen)
}

// refSegment judges the DDP segment seg at offset base of the datagram.
func refSegment(x rx, seg []byte, base int) rx {
	h, hl, err := ddp.Parse(seg)
	if err != nil {
		panic(err) // the framing checks guarantee the header
	}
	ctl := rdmap.Control(h.ULPControl)
	op := ctl.Opcode()
	x.hasDDP, x.tagged, x.last, x.opcode = 1, uint32(b2i(h.Tagged)), uint32(b2i(h.Last)), uint32(op)
	if h.Tagged {
		return daemon(x, "tagged")
	}
	x.qn, x.msn, x.mo = h.QN, h.MSN, h.MO
	if h.Version != ddp.Version {
		return daemon(x, "ddp-version")
	}
	if ctl.Version() != rdmap.Version {
		return daemon(x, "rdmap-version")
	}
	imm := op == rdmap.OpImmediateData || op == rdmap.OpImmediateDataSE
	if op != rdmap.OpSend && op != rdmap.OpSendSE && !imm {
		return daemon(x, "opcode")
	}
	x.solicited, x.hasImm = uint32(b2i(op == rdmap.OpSendSE || op == rdmap.OpImmediateDataSE)), uint32(b2i(imm))
	if h.QN != rdmap.QNSend {
		return daemon(x, "qn")
	}
	if imm {
		d, n, err := rdmap.ParseImmediateData(seg[hl:])
		if err != nil {
			return daemon(x, "short-imm")
		}
		x.imm = d.Value()
		hl += n
	}
	if h.MO != 0 || !h.Last {
		return daemon(x, "segmented")
	}
	x.class, x.reason = classSend, "none"
	x.payloadOff, x.payloadLen = uint32(base+hl), uint32(len(seg)-hl)
	return x
}

func daemon(x rx, reason string) rx {
	x.class, x.reason = classDaemon, reason
	return x
}

// compare checks the C answer against the reference: class and reason
// always; once the framing checks passed, every field (the RD header, the
// DDP header as far as it was judged, the Immediate Data, the payload's
// offset and length).
func compare(t *testing.T, what string, c, want rx) {
	t.Helper()
	if c.class != want.class || c.reason != want.reason {
		t.Fatalf("%s: C class %d (%s), reference %d (%s)", what, c.class, c.reason, want.class, want.reason)
	}
	if framingDrop[want.reason] {
		if want.reason != "truncated" && (c.qkey != want.qkey || c.srcQKey != want.srcQKey) {
			t.Fatalf("%s: keys C %#x/%#x, reference %#x/%#x", what, c.qkey, c.srcQKey, want.qkey, want.srcQKey)
		}
		return
	}
	if c != want {
		t.Fatalf("%s:\nC         %+v\nreference %+v", what, c, want)
	}
}

// rdCmd and udCmd are the t_fastpath commands that classify b.
func rdCmd(b []byte, qp qpCfg, peer *peerCfg) string {
	p := peerCfg{}
	have := 0
	if peer != nil {
		p, have = *peer, 1
	}
	return fmt.Sprintf("rd %d %d %d %d %d %d %d %d %s", qp.qkey, b2i(qp.crc), have, p.ourInc, p.peerInc, p.rcvNext,
		p.sndUna, p.sndNext, hexOr(b))
}

func udCmd(b []byte, qp qpCfg) string {
	return fmt.Sprintf("ud %d %d %s", qp.qkey, b2i(qp.crc), hexOr(b))
}
