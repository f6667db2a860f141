package fastpath

import (
	"bufio"
	"bytes"
	"encoding/hex"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/iwarpd/iwarpd/ddp"
	"github.com/iwarpd/iwarpd/internal/crc32c"
	"github.com/iwarpd/iwarpd/llp/dgram"
	"github.com/iwarpd/iwarpd/rdmap"
	"github.com/iwarpd/iwarpd/test/daemontest"
)

// sendFields are the fields of one Send segment, as the C side takes them
// (struct fp_send, struct fp_rd_hdr).
type sendFields struct {
	rd                           bool
	keys                         dgram.Keys
	msn, mo, imm                 uint32
	solicited, hasImm, last, crc bool
	h                            dgram.RDHeader // rd: its fields (type and version are the builder's)
	payload                      []byte
}

func b2i(b bool) int {
	if b {
		return 1
	}
	return 0
}

// cmd is the t_fastpath "send" command for f.
func (f *sendFields) cmd() string {
	return fmt.Sprintf("send %d %d %d %d %d %d %d %d %d %d %d %d %d %d %d %d %d %s", b2i(f.rd), f.keys.QKey, f.keys.SrcQKey,
		f.msn, f.mo, f.imm, b2i(f.solicited), b2i(f.hasImm), b2i(f.last), b2i(f.crc), f.h.Flags, f.h.Window,
		f.h.Incarnation, f.h.EchoedIncarnation, f.h.Seq, f.h.CumAck, f.h.SACK, hexOr(f.payload))
}

// opcode is the RDMAP opcode the daemon sends for f (verbsd/rd prepare,
// verbsd/ud prepareSend).
func (f *sendFields) opcode() rdmap.Opcode {
	switch {
	case f.hasImm && f.solicited:
		return rdmap.OpImmediateDataSE
	case f.hasImm:
		return rdmap.OpImmediateData
	case f.solicited:
		return rdmap.OpSendSE
	}
	return rdmap.OpSend
}

// goDatagram is what the Go encoders build for f, as the daemon does:
// the DDP header, the Immediate Data of a Send with Immediate, the payload,
// framed by dgram.AppendRD / AppendUD.
func (f *sendFields) goDatagram(dh *ddp.Header) []byte {
	seg := dh.Append(nil)
	if f.hasImm {
		imm := rdmap.MakeImmediateData(f.imm)
		seg = imm.Append(seg)
	}
	if f.rd {
		h := f.h
		h.Version, h.Type = dgram.RDVersion, dgram.RDData
		return dgram.AppendRD(nil, f.keys, &h, f.crc, seg, f.payload)
	}
	return dgram.AppendUD(nil, f.keys, f.crc, seg, f.payload)
}

func (f *sendFields) ddpHeader() ddp.Header {
	return ddp.Header{Version: ddp.Version, ULPControl: uint8(rdmap.MakeControl(f.opcode())), QN: rdmap.QNSend,
		MSN: f.msn, MO: f.mo, Last: f.last}
}

// checkSend has the C side build f and compares its flat datagram and its
// iovec (header, payload, trailer) with want.
func checkSend(t *testing.T, p *prog, f *sendFields, want []byte) {
	t.Helper()
	got := strings.Fields(p.ask("%s", f.cmd()))
	if len(got) != 3 {
		t.Fatalf("%s: answer %q", f.cmd(), got)
	}
	wantHex := hexOr(want)
	if got[0] != wantHex {
		t.Fatalf("%+v:\nC  %s\nGo %s", f, got[0], wantHex)
	}
	iovcnt := "3"
	if len(f.payload) == 0 {
		iovcnt = "2"
	}
	if got[1] != iovcnt || got[2] != wantHex {
		t.Fatalf("%+v: iovec (%s) %s, want (%s) %s", f, got[1], got[2], iovcnt, wantHex)
	}
}

// edge returns one of the values where encoders go wrong, or a random one.
func edge(r *rand.Rand) uint32 {
	switch r.IntN(6) {
	case 0:
		return 0
	case 1:
		return 1
	case 2:
		return 0x7fffffff
	case 3:
		return 0x80000000
	case 4:
		return 0xffffffff
	}
	return r.Uint32()
}

func randBytes(r *rand.Rand, n int) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(r.Uint32())
	}
	return b
}

func randRDHeader(r *rand.Rand) dgram.RDHeader {
	return dgram.RDHeader{Flags: dgram.RDFlags(r.Uint32()), Window: uint16(edge(r)), Incarnation: edge(r),
		EchoedIncarnation: edge(r), Seq: edge(r), CumAck: edge(r), SACK: edge(r)}
}

// TestCRC32c: both C implementations (SSE4.2 and table) and the
// incremental form equal internal/crc32c on the RFC 3720 vectors and on
// random inputs of every length up to 300 and a few larger.
func TestCRC32c(t *testing.T) {
	p := start(t, sanitizedProgram(t))
	r := rand.New(rand.NewPCG(1, 2))
	inputs := [][]byte{[]byte("123456789"), make([]byte, 32), bytes.Repeat([]byte{0xff}, 32)}
	inc := make([]byte, 32)
	for i := range inc {
		inc[i] = byte(i)
	}
	inputs = append(inputs, inc)
	for n := 0; n <= 300; n++ {
		inputs = append(inputs, randBytes(r, n))
	}
	for _, n := range []int{1472, 4096, 9000, 65507} {
		inputs = append(inputs, randBytes(r, n))
	}
	hw := false
	for _, in := range inputs {
		want := fmt.Sprintf("%08x", crc32c.Checksum(in))
		got := strings.Fields(p.ask("crc %s", hexOr(in)))
		if len(got) != 3 {
			t.Fatalf("answer %q", got)
		}
		if got[0] != want || (got[1] != "-" && got[1] != want) || got[2] != want {
			t.Fatalf("CRC32c of %d octets: table %s, sse4.2 %s, incremental %s; Go %s", len(in), got[0], got[1], got[2], want)
		}
		hw = got[1] != "-"
	}
	if got := p.ask("crc 313233343536373839"); !strings.HasPrefix(got, "e3069283") {
		t.Fatalf("check value: %s", got)
	}
	t.Logf("%d inputs; SSE4.2 path checked: %v", len(inputs), hw)
}

// TestEncodeSends: RD and UD Send segments over many field combinations
// equal the Go encoders' datagrams byte for byte, flat and as an iovec.
func TestEncodeSends(t *testing.T) {
	p := start(t, sanitizedProgram(t))
	r := rand.New(rand.NewPCG(3, 4))
	lens := []int{0, 1, 7, 8, 9, 15, 16, 17, 63, 64, 100, 1418, 1436, 1460, 8972}
	n := 0
	for _, rd := range []bool{false, true} {
		for combo := range 32 {
			for _, l := range lens {
				f := sendFields{rd: rd, keys: dgram.Keys{QKey: edge(r), SrcQKey: edge(r)}, msn: edge(r), mo: edge(r),
					imm: edge(r), solicited: combo&1 != 0, hasImm: combo&2 != 0, last: combo&4 != 0, crc: combo&8 != 0,
					payload: randBytes(r, l)}
				if combo&16 != 0 {
					f.mo = 0
				}
				if rd {
					f.h = randRDHeader(r)
				}
				dh := f.ddpHeader()
				checkSend(t, p, &f, f.goDatagram(&dh))
				n++
			}
		}
	}
	t.Logf("%d datagrams equal", n)
}

// TestEncodeSegmentedMessages: the segments of messages longer than one
// datagram, as the daemon cuts them (ddp.UntaggedSegments with
// dgram.MaxSegment of the datagram size), built segment by segment with
// the MO and L the segmenter gives.
func TestEncodeSegmentedMessages(t *testing.T) {
	p := start(t, sanitizedProgram(t))
	r := rand.New(rand.NewPCG(5, 6))
	for _, rd := range []bool{false, true} {
		for _, hasImm := range []bool{false, true} {
			for _, size := range []int{100, 1472} {
				total := 3*size + 17
				msg := randBytes(r, total)
				f := sendFields{rd: rd, keys: dgram.Keys{QKey: r.Uint32(), SrcQKey: r.Uint32()}, msn: r.Uint32(),
					imm: r.Uint32(), hasImm: hasImm, crc: true}
				ulp := 0
				if hasImm {
					ulp = rdmap.ImmediateDataLen
				}
				maxPayload := ddp.MaxPayload(dgram.MaxSegment(size, rd), false, ulp)
				if got := p.ask("maxpayload %d %d %d", size, b2i(rd), b2i(hasImm)); got != fmt.Sprint(maxPayload) {
					t.Fatalf("max payload of %d octets (rd %v imm %v): C %s, Go %d", size, rd, hasImm, got, maxPayload)
				}
				segs, err := ddp.UntaggedSegments(uint8(rdmap.MakeControl(f.opcode())), 0, rdmap.QNSend, f.msn, uint32(total), maxPayload)
				if err != nil {
					t.Fatal(err)
				}
				for i := range segs.Count() {
					s := segs.Segment(i)
					f.mo, f.last, f.payload = s.Header.MO, s.Header.Last, msg[s.Offset:int(s.Offset)+s.Len]
					if rd {
						f.h = dgram.RDHeader{Flags: dgram.FlagExtSACK | dgram.FlagAck, Window: 128, Incarnation: 7,
							EchoedIncarnation: 9, Seq: 100 + i, CumAck: 50}
					}
					want := f.goDatagram(&s.Header)
					if len(want) > size {
						t.Fatalf("Go datagram of %d octets over %d", len(want), size)
					}
					checkSend(t, p, &f, want)
				}
			}
		}
	}
}

// TestEncodeAcks: RD ACK-only datagrams equal dgram.AppendRD's.
func TestEncodeAcks(t *testing.T) {
	p := start(t, sanitizedProgram(t))
	r := rand.New(rand.NewPCG(7, 8))
	for i := range 2000 {
		k := dgram.Keys{QKey: edge(r), SrcQKey: edge(r)}
		h := randRDHeader(r)
		crc := i%4 != 0
		got := p.ask("ack %d %d %d %d %d %d %d %d %d %d", k.QKey, k.SrcQKey, h.Flags, h.Window, h.Incarnation,
			h.EchoedIncarnation, h.Seq, h.CumAck, h.SACK, b2i(crc))
		h.Version, h.Type = dgram.RDVersion, dgram.RDAck
		want := hexOr(dgram.AppendRD(nil, k, &h, crc))
		if got != want {
			t.Fatalf("ACK %+v crc %v:\nC  %s\nGo %s", h, crc, got, want)
		}
	}
}

// TestWireFormatGoldens: the C builder reproduces the golden datagrams
// of docs/wire-format.md §11 that are Sends and ACKs.
func TestWireFormatGoldens(t *testing.T) {
	p := start(t, sanitizedProgram(t))
	g := readGoldens(t)
	keys := dgram.Keys{QKey: 0x8b3a5c21, SrcQKey: 0x42f0e17d}
	cases := []struct {
		name string
		f    sendFields
	}{
		{"ud-send-hello", sendFields{keys: keys, msn: 1, last: true, crc: true, payload: []byte("hello iwarp")}},
		{"ud-send-se-seg1", sendFields{keys: keys, msn: 2, solicited: true, crc: true, payload: []byte("segmente")}},
		{"ud-send-se-seg2", sendFields{keys: keys, msn: 2, mo: 8, solicited: true, last: true, crc: true, payload: []byte("d send!!")}},
		{"rd-data-ack-sack", sendFields{rd: true, keys: keys, msn: 1, last: true, crc: true, payload: []byte("rd"),
			h: dgram.RDHeader{Flags: dgram.FlagAck, Window: 128, Incarnation: 0x1a2b3c4d, EchoedIncarnation: 0x5e6f7081,
				Seq: 7, CumAck: 5, SACK: 5}}},
	}
	for _, c := range cases {
		want, ok := g[c.name]
		if !ok {
			t.Fatalf("golden %s not in docs/wire-format.md", c.name)
		}
		checkSend(t, p, &c.f, want)
	}
	want, ok := g["rd-ack-notready"]
	if !ok {
		t.Fatal("golden rd-ack-notready not in docs/wire-format.md")
	}
	got := p.ask("ack %d %d %d %d %d %d %d %d %d 1", 0x42f0e17d, 0x8b3a5c21, 0xa0, 64, 0x5e6f7081, 0x1a2b3c4d, 0, 8, 0)
	if got != hex.EncodeToString(want) {
		t.Fatalf("rd-ack-notready:\nC      %s\ngolden %x", got, want)
	}
}

var goldenStart = regexp.MustCompile("^```golden name=([a-z0-9.-]+)")

// readGoldens returns the golden blocks of docs/wire-format.md by name:
// hex octets, '#' starts a comment.
func readGoldens(t *testing.T) map[string][]byte {
	t.Helper()
	root, err := daemontest.ModuleRoot()
	if err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(filepath.Join(root, "docs", "wire-format.md"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	g := map[string][]byte{}
	name := ""
	var cur []byte
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := sc.Text()
		if m := goldenStart.FindStringSubmatch(line); m != nil {
			name, cur = m[1], nil
			continue
		}
		if name == "" {
			continue
		}
		if strings.HasPrefix(line, "```") {
			g[name] = cur
			name = ""
			continue
		}
		if i := strings.IndexByte(line, '#'); i >= 0 {
			line = line[:i]
		}
		b, err := hex.DecodeString(strings.Join(strings.Fields(line), ""))
		if err != nil {
			t.Fatalf("golden %s: %v", name, err)
		}
		cur = append(cur, b...)
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return g
}
