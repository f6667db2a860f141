package conformance

import (
	"bytes"
	"fmt"
	"net/netip"
	"testing"

	"github.com/iwarpd/iwarpd/ddp"
	"github.com/iwarpd/iwarpd/internal/pcapgen"
	"github.com/iwarpd/iwarpd/iwerr"
	"github.com/iwarpd/iwarpd/mpa"
	"github.com/iwarpd/iwarpd/rdmap"
)

// This file builds one MPA conversation with our encoders and records, for
// every FPDU, what a decoder must find in it.

const (
	client = pcapgen.ClientToServer // the MPA initiator
	server = pcapgen.ServerToClient // the MPA responder
)

var (
	clientAddr = netip.MustParseAddrPort("127.0.0.1:40000")
	serverAddr = netip.MustParseAddrPort("127.0.0.2:21000") // no dissector claims 21000
)

// config is one MPA configuration of the conformance matrix.
type config struct {
	name    string
	rev     uint8
	crc     bool
	markers bool // both ends ask for markers (M in Request and Reply)
	mss     int
	// pack writes a burst of FPDUs as one byte stream cut at MSS boundaries
	// (FPDUs straddle TCP segments, several share one) instead of one FPDU
	// per TCP segment. Never with markers: tshark assumes aligned FPDUs then.
	pack bool
	// corrupt, if > 0, flips a bit of the CRC field of the corrupt-th FPDU
	// (1-based): the negative tests prove the checks can fail.
	corrupt int
}

var configs = []config{
	{name: "rev1-crc", rev: 1, crc: true, mss: 1460, pack: true},
	{name: "rev1-nocrc", rev: 1, crc: false, mss: 1460},
	{name: "rev2-crc", rev: 2, crc: true, mss: 1460},
	{name: "rev2-nocrc", rev: 2, crc: false, mss: 4000, pack: true},
	{name: "rev2-markers", rev: 2, crc: true, markers: true, mss: 1460},
	{name: "rev2-markers-nocrc-mss536", rev: 2, crc: false, markers: true, mss: 536},
}

// fpduRecord is what we encoded into one FPDU.
type fpduRecord struct {
	dir        pcapgen.Dir
	hdr        ddp.Header
	ulpdu      []byte // DDP segment (header, RDMAP header, payload)
	wire       []byte // the whole FPDU as sent, markers included
	start      uint64 // stream offset of wire[0], counted from the first FPDU of dir
	markers    []uint16
	rr         *rdmap.ReadRequest
	hasTerm    bool
	termHdr    []byte // the terminated DDP header carried by a Terminate
	termCode   iwerr.Error
	termSegLen uint16
}

func (r *fpduRecord) opcode() rdmap.Opcode { return rdmap.Control(r.hdr.ULPControl).Opcode() }

// conversation is an MPA connection being written into a capture.
type conversation struct {
	t       *testing.T
	cfg     config
	tcp     *pcapgen.TCPConversation
	params  [2]mpa.Params // per side (client, server)
	reqWire []byte
	repWire []byte
	snd     [2]*mpa.Sender
	msn     [2]ddp.MSNCounter
	mulpdu  int
	pos     [2]uint64 // wire octets of FPDUs sent per direction
	pending [2][][]byte
	fpdus   []*fpduRecord
}

// newConversation opens the TCP connection and runs the MPA negotiation
// through our Initiator and Responder, writing Request and Reply.
func newConversation(t *testing.T, w *pcapgen.Writer, cfg config) *conversation {
	t.Helper()
	tc, err := w.OpenTCP(pcapgen.TCPConfig{Client: clientAddr, Server: serverAddr, MSS: cfg.mss})
	if err != nil {
		t.Fatal(err)
	}
	c := &conversation{t: t, cfg: cfg, tcp: tc}
	c.negotiate()
	p := c.params
	if p[client].CRC != cfg.crc || p[server].CRC != cfg.crc {
		t.Fatalf("negotiated CRC %v/%v, want %v", p[client].CRC, p[server].CRC, cfg.crc)
	}
	for d := range 2 {
		if p[d].MarkersTx != cfg.markers || p[d].MarkersRx != cfg.markers {
			t.Fatalf("side %d: markers tx %v rx %v, want %v", d, p[d].MarkersTx, p[d].MarkersRx, cfg.markers)
		}
		if p[d].Revision != cfg.rev {
			t.Fatalf("side %d: revision %d, want %d", d, p[d].Revision, cfg.rev)
		}
		c.snd[d] = mpa.NewSender(p[d].CRC, p[d].MarkersTx)
	}
	c.mulpdu = mpa.MULPDU(cfg.mss, cfg.markers)
	return c
}

// flush writes the FPDUs pending in direction d: one TCP segment each, or
// (pack) as one stream cut at the MSS.
func (c *conversation) flush(d pcapgen.Dir) {
	c.t.Helper()
	if len(c.pending[d]) == 0 {
		return
	}
	var err error
	if c.cfg.pack {
		err = c.tcp.Write(d, bytes.Join(c.pending[d], nil))
	} else {
		err = c.tcp.WriteSegments(d, c.pending[d]...)
	}
	if err != nil {
		c.t.Fatal(err)
	}
	c.pending[d] = c.pending[d][:0]
}

// emit frames one DDP segment (header + rdmapHdr + payload) as an FPDU in
// direction d and records it.
func (c *conversation) emit(d pcapgen.Dir, h ddp.Header, rdmapHdr, payload []byte) *fpduRecord {
	c.t.Helper()
	c.flush(d.Reverse()) // keep the capture in call order
	hdr := h.Append(nil)
	ulpdu := append(append(append([]byte(nil), hdr...), rdmapHdr...), payload...)
	if len(ulpdu) > c.mulpdu {
		c.t.Fatalf("DDP segment of %d octets exceeds MULPDU %d", len(ulpdu), c.mulpdu)
	}
	wantLen := c.snd[d].WireLen(len(ulpdu))
	wire := c.snd[d].AppendFPDU(nil, hdr, rdmapHdr, payload)
	if len(wire) != wantLen {
		c.t.Fatalf("AppendFPDU wrote %d octets, WireLen said %d", len(wire), wantLen)
	}
	if len(wire) > c.cfg.mss {
		c.t.Fatalf("FPDU of %d octets does not fit one TCP segment (MSS %d)", len(wire), c.cfg.mss)
	}
	if len(c.fpdus)+1 == c.cfg.corrupt {
		wire[len(wire)-1] ^= 0x10
	}
	r := &fpduRecord{dir: d, hdr: h, ulpdu: ulpdu, wire: wire, start: c.pos[d]}
	r.markers = expectedMarkers(r.start, len(wire), c.cfg.markers)
	c.pos[d] += uint64(len(wire))
	c.pending[d] = append(c.pending[d], wire)
	c.fpdus = append(c.fpdus, r)
	return r
}

// expectedMarkers returns the FPDUPTR of every marker RFC 5044 §5.1 puts in
// an FPDU occupying stream octets [start, start+n): one every 512 octets of
// the stream; a marker at the FPDU's first octet precedes its header (FPDUPTR
// 0), any other points back to the ULPDU_Length field.
func expectedMarkers(start uint64, n int, markers bool) []uint16 {
	if !markers {
		return nil
	}
	var out []uint16
	header := start
	if start%512 == 0 {
		header += 4
	}
	for m := (start + 511) / 512 * 512; m < start+uint64(n); m += 512 {
		if m == start {
			out = append(out, 0)
		} else {
			out = append(out, uint16(m-header))
		}
	}
	return out
}

// send writes an untagged Send-family message on QN 0.
func (c *conversation) send(d pcapgen.Dir, op rdmap.Opcode, invalidate uint32, payload []byte) {
	c.t.Helper()
	c.untagged(d, op, rdmap.QNSend, invalidate, nil, payload)
}

// untagged segments an untagged message; rdmapHdr (Read Request, Terminate)
// is the message payload's head and must fit the first segment.
func (c *conversation) untagged(d pcapgen.Dir, op rdmap.Opcode, qn, ulpReserved uint32, rdmapHdr, payload []byte) []*fpduRecord {
	c.t.Helper()
	msn, err := c.msn[d].NextMSN(qn)
	if err != nil {
		c.t.Fatal(err)
	}
	msg := append(append([]byte(nil), rdmapHdr...), payload...)
	seg, err := ddp.UntaggedSegments(uint8(rdmap.MakeControl(op)), ulpReserved, qn, msn, uint32(len(msg)),
		ddp.MaxPayload(c.mulpdu, false, 0))
	if err != nil {
		c.t.Fatal(err)
	}
	if len(rdmapHdr) > 0 && seg.Count() != 1 {
		c.t.Fatalf("%v message with a %d-octet RDMAP header spans %d segments", op, len(rdmapHdr), seg.Count())
	}
	var recs []*fpduRecord
	for s, ok := seg.Next(); ok; s, ok = seg.Next() {
		recs = append(recs, c.emit(d, s.Header, nil, msg[s.Offset:int(s.Offset)+s.Len]))
	}
	return recs
}

// tagged writes an RDMA Write or Read Response to (stag, to).
func (c *conversation) tagged(d pcapgen.Dir, op rdmap.Opcode, stag uint32, to uint64, payload []byte) {
	c.t.Helper()
	c.flush(d.Reverse())
	seg, err := ddp.TaggedSegments(uint8(rdmap.MakeControl(op)), stag, to, uint32(len(payload)),
		ddp.MaxPayload(c.mulpdu, true, 0))
	if err != nil {
		c.t.Fatal(err)
	}
	for s, ok := seg.Next(); ok; s, ok = seg.Next() {
		c.emit(d, s.Header, nil, payload[s.Offset:int(s.Offset)+s.Len])
	}
}

// readRequest writes an RDMA Read Request on QN 1.
func (c *conversation) readRequest(d pcapgen.Dir, rr rdmap.ReadRequest) {
	c.t.Helper()
	recs := c.untagged(d, rdmap.OpReadRequest, rdmap.QNReadRequest, 0, rr.Append(nil), nil)
	recs[0].rr = &rr
}

// terminate writes a Terminate on QN 2 reporting err about the DDP segment
// of segLen octets whose header is termHdr.
func (c *conversation) terminate(d pcapgen.Dir, code iwerr.Error, termHdr []byte, segLen uint16) {
	c.t.Helper()
	term := rdmap.TerminateFor(code, termHdr, nil)
	term.SetSegmentLength(segLen)
	recs := c.untagged(d, rdmap.OpTerminate, rdmap.QNTerminate, 0, term.Append(nil), nil)
	recs[0].hasTerm, recs[0].termHdr, recs[0].termCode, recs[0].termSegLen = true, termHdr, code, segLen
}

// pattern returns n payload octets that differ per call site.
func pattern(n int, seed byte) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = seed ^ byte(i) ^ byte(i>>8)
	}
	return b
}

// buildConversation writes the whole scenario of cfg into w and returns the
// conversation with its FPDU records.
func buildConversation(t *testing.T, w *pcapgen.Writer, cfg config) *conversation {
	t.Helper()
	c := newConversation(t, w, cfg)
	maxSend := ddp.MaxPayload(c.mulpdu, false, 0)
	maxWrite := ddp.MaxPayload(c.mulpdu, true, 0)

	// RFC 6581 peer-to-peer: the initiator's first FPDU is the zero-length
	// RTR the responder chose; we offer Write only, as siw answers.
	if cfg.rev == 2 {
		if c.params[client].RTR != mpa.RTRWrite || c.params[server].RTR != mpa.RTRWrite {
			t.Fatalf("RTR %v/%v, want Write", c.params[client].RTR, c.params[server].RTR)
		}
		c.tagged(client, rdmap.OpWrite, 1, 0, nil)
		c.flush(client)
	}

	// Sends of many sizes from the initiator: zero length, every pad length,
	// exactly one full segment, one octet more, multi-segment messages.
	seed := byte(1)
	for _, n := range []int{0, 1, 2, 3, 4, 100, 1000, maxSend, maxSend + 1, 5000, 20000} {
		c.send(client, rdmap.OpSend, 0, pattern(n, seed))
		seed++
	}
	c.send(client, rdmap.OpSendSE, 0, pattern(777, seed))
	c.send(client, rdmap.OpSendInvalidate, 0x0000abcd, pattern(64, seed+1))
	c.send(client, rdmap.OpSendSEInvalidate, 0x12345678, pattern(3000, seed+2))
	c.flush(client)

	// Sends from the responder.
	for _, n := range []int{1, 513, 4096, 10000} {
		c.send(server, rdmap.OpSend, 0, pattern(n, seed))
		seed++
	}
	c.send(server, rdmap.OpSendSE, 0, pattern(50, seed))

	// RDMA Writes: multi-segment with TO advancing, and a short one high in
	// the TO space.
	c.tagged(client, rdmap.OpWrite, 0x00c0ffee, 0x10000, pattern(10000, 0x55))
	c.tagged(client, rdmap.OpWrite, 0x00c0ffee, 0x7fff_ffff_ffff_fff0, pattern(3, 0x66))
	c.tagged(client, rdmap.OpWrite, 0x00c0ffee, 0x20000, pattern(maxWrite, 0x77))

	// RDMA Read: Request from the initiator, multi-segment Response.
	const readLen = 6000
	c.readRequest(client, rdmap.ReadRequest{SinkStag: 0x11, SinkTO: 0x2000, Size: readLen, SourceStag: 0x22, SourceTO: 0x3000})
	c.tagged(server, rdmap.OpReadResponse, 0x11, 0x2000, pattern(readLen, 0x88))
	// and one the other way round, zero-length.
	c.readRequest(server, rdmap.ReadRequest{SinkStag: 0x33, SinkTO: 0, Size: 0, SourceStag: 0x44, SourceTO: 0x100})
	c.tagged(client, rdmap.OpReadResponse, 0x33, 0, nil)

	// RDMA Write from the responder.
	c.tagged(server, rdmap.OpWrite, 0xdead0001, 0x400, pattern(2500, 0x99))

	// Terminate from the responder: a segment on an invalid QN.
	bad := ddp.Header{Version: ddp.Version, Last: true, ULPControl: uint8(rdmap.MakeControl(rdmap.OpSend)), QN: 7, MSN: 5}
	c.terminate(server, iwerr.DDPInvalidQN, bad.Append(nil), 30)
	c.flush(server)

	if err := c.tcp.Close(server); err != nil {
		t.Fatal(err)
	}
	return c
}

// negotiate runs Request/Reply through our codecs and state machines and
// writes both frames.
func (c *conversation) negotiate() {
	t := c.t
	t.Helper()
	crc := mpa.CRCOff
	if c.cfg.crc {
		crc = mpa.CRCRequired
	}
	pol := mpa.Policy{Revision: c.cfg.rev, CRC: crc, Markers: c.cfg.markers, IRD: 16, ORD: 16}
	ipol, rpol := pol, pol
	if c.cfg.rev == 2 {
		ipol.PeerToPeer, rpol.PeerToPeer = true, true
		ipol.RTRTypes, rpol.RTRTypes = mpa.RTRSetWrite, mpa.RTRSetWrite
	}
	ini := mpa.NewInitiator(ipol)
	req := ini.Request()
	c.reqWire = req.Append(nil)
	if err := c.tcp.WriteSegments(client, c.reqWire); err != nil {
		t.Fatal(err)
	}
	reqRx, n, err := mpa.ParseFrame(c.reqWire)
	if err != nil || n != len(c.reqWire) {
		t.Fatalf("ParseFrame(request) = %d, %v", n, err)
	}
	rsp := mpa.NewResponder(rpol)
	rep, sp, err := rsp.HandleRequest(reqRx)
	if err != nil {
		t.Fatalf("HandleRequest: %v", err)
	}
	c.repWire = rep.Append(nil)
	if err := c.tcp.WriteSegments(server, c.repWire); err != nil {
		t.Fatal(err)
	}
	repRx, n, err := mpa.ParseFrame(c.repWire)
	if err != nil || n != len(c.repWire) {
		t.Fatalf("ParseFrame(reply) = %d, %v", n, err)
	}
	cp, err := ini.HandleReply(repRx)
	if err != nil {
		t.Fatalf("HandleReply: %v", err)
	}
	c.params[client], c.params[server] = cp, sp
}

// String describes a record for failure messages.
func (r *fpduRecord) String() string {
	h := r.hdr
	if h.Tagged {
		return fmt.Sprintf("%v %v stag=%#x to=%#x len=%d L=%v", r.dir, r.opcode(), h.Stag, h.TO, len(r.ulpdu), h.Last)
	}
	return fmt.Sprintf("%v %v qn=%d msn=%d mo=%d len=%d L=%v", r.dir, r.opcode(), h.QN, h.MSN, h.MO, len(r.ulpdu), h.Last)
}
