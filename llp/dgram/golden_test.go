package dgram

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"encoding/hex"
	"os"
	"regexp"
	"strings"
	"testing"

	"github.com/iwarpd/iwarpd/ddp"
	"github.com/iwarpd/iwarpd/rdmap"
)

// The golden datagrams of docs/wire-format.md. The hex strings were
// computed by hand (and their CRCs with an independent bitwise CRC32c); the
// encoder must reproduce them byte for byte, and the document must carry
// the same bytes (TestWireFormatDocGoldens).

func untagged(op rdmap.Opcode, last bool, qn, msn, mo uint32) []byte {
	h := ddp.Header{Last: last, Version: ddp.Version, ULPControl: uint8(rdmap.MakeControl(op)), QN: qn, MSN: msn, MO: mo}
	return h.Append(nil)
}

func tagged(op rdmap.Opcode, last bool, stag uint32, to uint64) []byte {
	h := ddp.Header{Tagged: true, Last: last, Version: ddp.Version, ULPControl: uint8(rdmap.MakeControl(op)), Stag: stag, TO: to}
	return h.Append(nil)
}

// golden key headers: goldenKeys from the sender of the UD goldens and of
// rd-data-ack-sack (0x8b3a5c21 is the receiver's Q_Key), goldenKeysBack the
// answer (rd-ack-notready) of that receiver.
var (
	goldenKeys     = Keys{QKey: 0x8b3a5c21, SrcQKey: 0x42f0e17d}
	goldenKeysBack = Keys{QKey: 0x42f0e17d, SrcQKey: 0x8b3a5c21}
)

// golden RD headers, shared with other tests.
var (
	goldenRDData = RDHeader{Version: RDVersion, Type: RDData, Flags: FlagAck, Window: 128,
		Incarnation: 0x1a2b3c4d, EchoedIncarnation: 0x5e6f7081, Seq: 7, CumAck: 5, SACK: 0x5}
	goldenRDAck = RDHeader{Version: RDVersion, Type: RDAck, Flags: FlagAck | FlagNotReady, Window: 64,
		Incarnation: 0x5e6f7081, EchoedIncarnation: 0x1a2b3c4d, Seq: 0, CumAck: 8, SACK: 0}
)

// terminateInvalidQN is the hand-encoded RFC 5040 §4.8 Terminate body the
// ud-error-invalid-qn golden carries: Layer 1 (DDP), EType 2 (untagged
// buffer), ECode 0x01 (invalid QN), M and D set, the terminated segment's
// length (29) and its 18-octet DDP header (a Send to QN 9).
func terminateInvalidQN() []byte {
	b := []byte{0x12, 0x01, 0xc0, 0x00}
	b = binary.BigEndian.AppendUint16(b, 29)
	return append(b, untagged(rdmap.OpSend, true, 9, 1, 0)...)
}

type golden struct {
	name  string
	hex   string
	rd    bool
	build func() []byte
}

var goldens = []golden{
	{
		name: "ud-send-hello",
		hex:  "8b 3a 5c 21 42 f0 e1 7d 41 43 00 00 00 00 00 00 00 00 00 00 00 01 00 00 00 00 68 65 6c 6c 6f 20 69 77 61 72 70 04 f7 40 98",
		build: func() []byte {
			return AppendUD(nil, goldenKeys, true, untagged(rdmap.OpSend, true, rdmap.QNSend, 1, 0), []byte("hello iwarp"))
		},
	},
	{
		name: "ud-send-se-seg1",
		hex:  "8b 3a 5c 21 42 f0 e1 7d 01 45 00 00 00 00 00 00 00 00 00 00 00 02 00 00 00 00 73 65 67 6d 65 6e 74 65 1f f0 68 26",
		build: func() []byte {
			return AppendUD(nil, goldenKeys, true, untagged(rdmap.OpSendSE, false, rdmap.QNSend, 2, 0), []byte("segmente"))
		},
	},
	{
		name: "ud-send-se-seg2",
		hex:  "8b 3a 5c 21 42 f0 e1 7d 41 45 00 00 00 00 00 00 00 00 00 00 00 02 00 00 00 08 64 20 73 65 6e 64 21 21 42 01 4b 52",
		build: func() []byte {
			return AppendUD(nil, goldenKeys, true, untagged(rdmap.OpSendSE, true, rdmap.QNSend, 2, 8), []byte("d send!!"))
		},
	},
	{
		name: "rd-data-ack-sack",
		rd:   true,
		hex:  "8b 3a 5c 21 42 f0 e1 7d 11 80 00 80 1a 2b 3c 4d 5e 6f 70 81 00 00 00 07 00 00 00 05 00 00 00 05 41 43 00 00 00 00 00 00 00 00 00 00 00 01 00 00 00 00 72 64 5c e8 74 b6",
		build: func() []byte {
			return AppendRD(nil, goldenKeys, &goldenRDData, true, untagged(rdmap.OpSend, true, rdmap.QNSend, 1, 0), []byte("rd"))
		},
	},
	{
		name: "rd-ack-notready",
		rd:   true,
		hex:  "42 f0 e1 7d 8b 3a 5c 21 12 a0 00 40 5e 6f 70 81 1a 2b 3c 4d 00 00 00 00 00 00 00 08 00 00 00 00 84 65 6b 05",
		build: func() []byte {
			return AppendRD(nil, goldenKeysBack, &goldenRDAck, true)
		},
	},
	{
		name: "ud-write-record",
		hex:  "8b 3a 5c 21 42 f0 e1 7d c1 4c 00 01 23 00 00 00 00 00 00 01 00 06 00 00 00 09 00 00 00 0c 00 00 00 06 77 6f 72 6c 64 21 d2 e0 b3 d1",
		build: func() []byte {
			wr := rdmap.WriteRecord{RecordID: 9, MessageLength: 12, MessageOffset: 6}
			return AppendUD(nil, goldenKeys, true, tagged(rdmap.OpWriteRecord, true, 0x00012300, 0x10000+6), wr.Append(nil), []byte("world!"))
		},
	},
	{
		name: "ud-write-record-imm",
		hex:  "8b 3a 5c 21 42 f0 e1 7d c1 4d 00 01 23 00 00 00 00 00 00 01 00 06 00 00 00 09 00 00 00 0c 00 00 00 06 ca fe f0 0d 00 00 00 00 77 6f 72 6c 64 21 27 09 74 98",
		build: func() []byte {
			wr := rdmap.WriteRecordImm{WriteRecord: rdmap.WriteRecord{RecordID: 9, MessageLength: 12, MessageOffset: 6},
				Imm: rdmap.MakeImmediateData(0xcafef00d)}
			return AppendUD(nil, goldenKeys, true, tagged(rdmap.OpWriteRecordImm, true, 0x00012300, 0x10000+6), wr.Append(nil), []byte("world!"))
		},
	},
	{
		name: "ud-error-invalid-qn",
		hex:  "42 f0 e1 7d 8b 3a 5c 21 41 47 00 00 00 00 00 00 00 02 00 00 00 01 00 00 00 00 12 01 c0 00 00 1d 41 43 00 00 00 00 00 00 00 09 00 00 00 01 00 00 00 00 97 f1 34 41",
		build: func() []byte {
			return AppendUD(nil, goldenKeysBack, true, untagged(rdmap.OpTerminate, true, rdmap.QNTerminate, 1, 0), terminateInvalidQN())
		},
	},
}

func mustHex(t testing.TB, s string) []byte {
	t.Helper()
	b, err := hex.DecodeString(strings.Join(strings.Fields(s), ""))
	if err != nil {
		t.Fatalf("bad hex %q: %v", s, err)
	}
	return b
}

// bitwiseCRC32c is an independent (slow, table-free) CRC-32C used to check
// the golden trailers without trusting the code under test.
func bitwiseCRC32c(b []byte) uint32 {
	c := ^uint32(0)
	for _, x := range b {
		c ^= uint32(x)
		for range 8 {
			if c&1 != 0 {
				c = c>>1 ^ 0x82f63b78
			} else {
				c >>= 1
			}
		}
	}
	return ^c
}

func TestGoldenEncode(t *testing.T) {
	for _, g := range goldens {
		t.Run(g.name, func(t *testing.T) {
			want := mustHex(t, g.hex)
			if got := g.build(); !bytes.Equal(got, want) {
				t.Fatalf("encoder:\n got %x\nwant %x", got, want)
			}
			body := want[:len(want)-4]
			if c := binary.LittleEndian.Uint32(want[len(body):]); c != bitwiseCRC32c(body) {
				t.Fatalf("golden trailer %#08x, bitwise CRC32c %#08x", c, bitwiseCRC32c(body))
			}
			parse := ParseUD
			if g.rd {
				parse = ParseRD
			}
			d, err := parse(want, true)
			if err != nil || !d.CRCValid {
				t.Fatalf("parse: %v (CRCValid %v)", err, d.CRCValid)
			}
		})
	}
}

// docGoldens reads the ```golden name=... fenced blocks of
// docs/wire-format.md and returns name → bytes, in order of appearance.
func docGoldens(t *testing.T) (map[string][]byte, []string) {
	t.Helper()
	f, err := os.Open("../../docs/wire-format.md")
	if err != nil {
		t.Fatalf("open wire-format.md: %v", err)
	}
	defer f.Close()
	open := regexp.MustCompile("^```golden name=([a-z0-9-]+)\\s*$")
	out := map[string][]byte{}
	var order []string
	var name string
	var hexText strings.Builder
	sc := bufio.NewScanner(f)
	line := 0
	for sc.Scan() {
		line++
		l := sc.Text()
		if name == "" {
			if m := open.FindStringSubmatch(l); m != nil {
				name = m[1]
				hexText.Reset()
			} else if strings.HasPrefix(l, "```golden") {
				t.Fatalf("wire-format.md:%d: malformed golden fence %q", line, l)
			}
			continue
		}
		if strings.TrimSpace(l) == "```" {
			if _, dup := out[name]; dup {
				t.Fatalf("wire-format.md:%d: duplicate golden %q", line, name)
			}
			out[name] = mustHex(t, hexText.String())
			order = append(order, name)
			name = ""
			continue
		}
		// Text after '#' on a line is a comment.
		if i := strings.IndexByte(l, '#'); i >= 0 {
			l = l[:i]
		}
		hexText.WriteString(l)
		hexText.WriteByte(' ')
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	if name != "" {
		t.Fatalf("wire-format.md: unterminated golden %q", name)
	}
	return out, order
}

// TestWireFormatDocGoldens checks that every profile golden in the document
// is what the encoder produces, that every golden of this test is in the
// document, and that the document's RFC vectors (names starting "rfc-") are
// self-consistent (CRC trailers, lengths, DDP headers).
func TestWireFormatDocGoldens(t *testing.T) {
	doc, order := docGoldens(t)
	byName := map[string]golden{}
	for _, g := range goldens {
		byName[g.name] = g
		b, ok := doc[g.name]
		if !ok {
			t.Errorf("golden %q missing from docs/wire-format.md", g.name)
			continue
		}
		if want := g.build(); !bytes.Equal(b, want) {
			t.Errorf("doc golden %q:\n doc %x\n enc %x", g.name, b, want)
		}
	}
	rfc := 0
	for _, name := range order {
		b := doc[name]
		switch {
		case strings.HasPrefix(name, "rfc-fpdu-"):
			rfc++
			checkFPDU(t, name, b)
		case strings.HasPrefix(name, "rfc-mpa-"):
			rfc++
			checkMPAFrame(t, name, b)
		case strings.HasPrefix(name, "rfc-crc-"):
			rfc++
			checkCRCVector(t, name, b)
		default:
			if _, ok := byName[name]; !ok {
				t.Errorf("doc golden %q is checked by no test", name)
			}
		}
	}
	if rfc < 3 {
		t.Errorf("only %d RFC vectors found in the document", rfc)
	}
}

// checkFPDU: ULPDU_Length(2) | DDP segment | pad to 4 | CRC32c LE.
func checkFPDU(t *testing.T, name string, b []byte) {
	if len(b) < 2+ddp.TaggedHeaderLen+4 {
		t.Errorf("%s: %d octets is too short for an FPDU", name, len(b))
		return
	}
	ulpdu := int(binary.BigEndian.Uint16(b))
	pad := (4 - (2+ulpdu)%4) % 4
	if 2+ulpdu+pad+4 != len(b) {
		t.Errorf("%s: ULPDU_Length %d, pad %d: want %d octets, have %d", name, ulpdu, pad, 2+ulpdu+pad+4, len(b))
		return
	}
	if c := binary.LittleEndian.Uint32(b[len(b)-4:]); c != bitwiseCRC32c(b[:len(b)-4]) {
		t.Errorf("%s: CRC trailer %#08x, computed %#08x", name, c, bitwiseCRC32c(b[:len(b)-4]))
	}
	h, n, err := ddp.Parse(b[2 : 2+ulpdu])
	if err != nil || h.Version != ddp.Version || rdmap.Control(h.ULPControl).Version() != rdmap.Version {
		t.Errorf("%s: DDP header %+v, %d, %v", name, h, n, err)
	}
}

// checkMPAFrame: key(16) | flags | rev | PD_Length(2) | private data.
func checkMPAFrame(t *testing.T, name string, b []byte) {
	if len(b) < 20 {
		t.Errorf("%s: %d octets is too short for an MPA frame", name, len(b))
		return
	}
	key := string(b[:16])
	if key != "MPA ID Req Frame" && key != "MPA ID Rep Frame" {
		t.Errorf("%s: key %q", name, key)
	}
	if pd := int(binary.BigEndian.Uint16(b[18:20])); 20+pd != len(b) {
		t.Errorf("%s: PD_Length %d but %d octets of private data", name, pd, len(b)-20)
	}
}

// checkCRCVector: input | CRC32c LE of the input.
func checkCRCVector(t *testing.T, name string, b []byte) {
	body := b[:len(b)-4]
	if c := binary.LittleEndian.Uint32(b[len(body):]); c != bitwiseCRC32c(body) || c != Checksum(body) {
		t.Errorf("%s: trailer %#08x, bitwise %#08x, Checksum %#08x", name, c, bitwiseCRC32c(body), Checksum(body))
	}
}
