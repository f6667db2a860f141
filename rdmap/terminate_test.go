package rdmap

import (
	"bytes"
	"encoding/binary"
	"errors"
	"os"
	"testing"

	"github.com/iwarpd/iwarpd/ddp"
	"github.com/iwarpd/iwarpd/internal/captures"
	"github.com/iwarpd/iwarpd/iwerr"
)

// Golden Terminate headers (the DDP payload after the 18-octet untagged DDP
// header of the Terminate message).
const (
	// protocol-notes.md §A.5.3, decoded correctly by tshark: DDP layer,
	// untagged buffer, invalid QN, D=1, segment length 30, and the
	// terminated untagged DDP header (a Send on QN 5, MSN 1, MO 0).
	termRFCHex = "12 01 40 00 001e 41430000000000000005 0000000100000000"
	// Linux siw, captures/host-probe-terminate-bounds.pcap frame 12: DDP
	// layer, tagged buffer, base/bounds, M=D=1 in siw's bitfield layout,
	// segment length 100, the Read Response header it refused.
	termSiwHex = "11 01 03 00 0064 c14227de24000000559a9fd1d110"
	// siw's DDP header of the Read Response above, and its Read Request.
	siwRRespHex = "c14227de24000000559a9fd1d110"
	siwRReqHex  = "27de2400 0000559a9fd1d110 00000064 11110000 00007f0000100000"
	// The untagged DDP header of a Read Request: QN 1, MSN 7, MO 0.
	rreqDDPHex = "4141 00000000 00000001 00000007 00000000"
)

func TestTerminateGolden(t *testing.T) {
	untaggedHdr := rdmapHex(t, "41430000000000000005 0000000100000000")
	rreq := rdmapHex(t, siwRReqHex)
	rresp := rdmapHex(t, siwRRespHex)
	cases := []struct {
		name string
		hex  string
		term Terminate
	}{
		{"rfc invalid QN", termRFCHex, Terminate{
			Err: iwerr.DDPInvalidQN, DDPHeaderIncluded: true, DDPSegmentLength: 30, DDPHeader: untaggedHdr}},
		{"siw base bounds", termSiwHex, Terminate{
			Err: iwerr.DDPBaseBounds, SegLenValid: true, DDPHeaderIncluded: true, DDPSegmentLength: 100,
			DDPHeader: rresp, SiwLayout: true}},
		{"rfc catastrophic, no headers", "00 00 00 00", Terminate{Err: iwerr.RDMAPLocalCatastrophicError}},
		{"rfc LLP insufficient IRD", "20 06 00 00", Terminate{Err: iwerr.MPAInsufficientIRD}},
		{"rfc remote protection with read request", "01 02 e0 00 0000 " + rreqDDPHex + siwRReqHex,
			Terminate{Err: iwerr.RDMAPAccessRights, SegLenValid: true, DDPHeaderIncluded: true, RDMAPHeaderIncluded: true,
				DDPHeader: rdmapHex(t, rreqDDPHex), RDMAPHeader: rreq}},
		{"rfc reserved kept", "12 05 1f ff", Terminate{Err: iwerr.DDPMessageTooLong, Reserved: 0x1fff}},
		{"siw no flags, only siw triple registered", "21 06 00 00", Terminate{Err: iwerr.DDPUntaggedInvalidVersion, SiwLayout: true}},
	}
	for _, tt := range cases {
		t.Run(tt.name, func(t *testing.T) {
			want := rdmapHex(t, tt.hex)
			got := tt.term.Append(nil)
			if !bytes.Equal(got, want) {
				t.Fatalf("Append = %x, want %x", got, want)
			}
			if tt.term.Len() != len(want) {
				t.Fatalf("Len = %d, want %d", tt.term.Len(), len(want))
			}
			term, n, err := ParseTerminate(append(want, 0xee, 0xee))
			if err != nil || n != len(want) {
				t.Fatalf("ParseTerminate: n=%d err=%v", n, err)
			}
			if !terminateEqual(term, tt.term) {
				t.Fatalf("ParseTerminate = %+v, want %+v", term, tt.term)
			}
		})
	}
}

func terminateEqual(a, b Terminate) bool {
	return a.Err == b.Err && a.SegLenValid == b.SegLenValid && a.DDPHeaderIncluded == b.DDPHeaderIncluded &&
		a.RDMAPHeaderIncluded == b.RDMAPHeaderIncluded && a.Reserved == b.Reserved &&
		a.DDPSegmentLength == b.DDPSegmentLength && bytes.Equal(a.DDPHeader, b.DDPHeader) &&
		bytes.Equal(a.RDMAPHeader, b.RDMAPHeader) && a.SiwLayout == b.SiwLayout
}

// The siw Terminate read as RFC layout would be the same triple with no
// headers and junk reserved bits; the detection picks siw, and ParseTerminateAs
// can force either reading.
func TestTerminateLayoutDetection(t *testing.T) {
	cases := []struct {
		hex string
		siw bool
	}{
		{"11 01 03 00", true},  // siw: M|D
		{"21 01 02 00", true},  // siw: DDP/untagged/invalid QN, D
		{"01 02 07 00", true},  // siw M|D|R; swapped octet 0 = DDP layer, local catastrophic (any code)
		{"12 01 40 00", false}, // RFC golden
		{"12 01 c0 00", false}, // RFC M|D
		{"12 01 00 00", false}, // RFC, no flags, registered
		{"21 06 00 00", true},  // no flags: RFC reading (LLP type 1) unregistered, siw reading registered
		{"20 06 00 00", false}, // ambiguous (siw RDMAP opcode error vs RFC MPA insufficient IRD): RFC wins
		{"12 01 03 01", false}, // siw flags but non-zero siw reserved bits
		{"12 01 08 00", false}, // reserved bit outside the siw flag positions
		{"f1 01 03 00", false}, // swapped triple not registered
		{"12 01", false},       // short
	}
	for _, c := range cases {
		if got := SiwLayoutLikely(rdmapHex(t, c.hex)); got != c.siw {
			t.Errorf("SiwLayoutLikely(%s) = %v, want %v", c.hex, got, c.siw)
		}
	}
	b := rdmapHex(t, termSiwHex)
	rfc, n, err := ParseTerminateAs(b, false)
	if err != nil || n != 4 || rfc.Err != iwerr.DDPBaseBounds || rfc.Reserved != 0x0300 || rfc.DDPHeaderIncluded || rfc.SiwLayout {
		t.Fatalf("forced RFC reading = %+v, %d, %v", rfc, n, err)
	}
	siw, n, err := ParseTerminateAs(rdmapHex(t, "20 06 00 00"), true)
	if err != nil || n != 4 || siw.Err != iwerr.RDMAPUnexpectedOpcode || !siw.SiwLayout {
		t.Fatalf("forced siw reading = %+v, %d, %v", siw, n, err)
	}
}

// siw sets R on a terminated Send but attaches only the DDP header; the siw
// reading accepts that, the RFC reading would not.
func TestTerminateSiwRWithoutRDMAPHeader(t *testing.T) {
	b := rdmapHex(t, "01 02 07 00 0000 41430000000000000000 0000000100000000")
	term, n, err := ParseTerminate(b)
	wantErr := iwerr.Error{Layer: iwerr.LayerDDP, Type: iwerr.DDPLocalCatastrophic, Code: 2}
	if err != nil || n != len(b) || !term.SiwLayout || !term.RDMAPHeaderIncluded || len(term.RDMAPHeader) != 0 || term.Err != wantErr {
		t.Fatalf("ParseTerminate = %+v, %d, %v", term, n, err)
	}
	if enc := term.Append(nil); !bytes.Equal(enc, b) {
		t.Fatalf("re-encoded %x, want %x", enc, b)
	}
	rfc := append([]byte{0x01, 0x02, 0xe0, 0x00}, b[4:]...)
	if _, _, err := ParseTerminate(rfc); !errors.Is(err, ErrTerminateTruncated) {
		t.Fatalf("RFC R without header: %v", err)
	}
}

func TestTerminateRoundTrip(t *testing.T) {
	tagged := rdmapHex(t, siwRRespHex)
	for _, term := range []Terminate{
		{Err: iwerr.DDPBaseBounds, SegLenValid: true, DDPHeaderIncluded: true, DDPSegmentLength: 0xffff, DDPHeader: tagged},
		{Err: iwerr.DDPBaseBounds, SegLenValid: true, DDPHeaderIncluded: true, DDPSegmentLength: 7, DDPHeader: tagged, SiwLayout: true, Reserved: 0x1abc},
		{Err: iwerr.RDMAPInvalidVersion, SegLenValid: true}, // M without D: no length field
		{Err: iwerr.Error{Layer: 0xf, Type: 0xf, Code: 0xff}, Reserved: 1},
	} {
		b := term.Append(nil)
		if len(b) != term.Len() {
			t.Fatalf("%+v: Len %d, encoded %d", term, term.Len(), len(b))
		}
		got, n, err := ParseTerminateAs(b, term.SiwLayout)
		if err != nil || n != len(b) || !terminateEqual(got, term) {
			t.Fatalf("round trip %+v: got %+v, %d, %v", term, got, n, err)
		}
	}
}

func TestTerminateTruncated(t *testing.T) {
	for _, h := range []string{termRFCHex, termSiwHex,
		"01 02 e0 00 0000 " + rreqDDPHex + siwRReqHex} {
		full := rdmapHex(t, h)
		for i := range full {
			_, n, err := ParseTerminate(full[:i])
			if !errors.Is(err, ErrTerminateTruncated) || n != 0 {
				t.Fatalf("%s prefix %d: n=%d err=%v", h, i, n, err)
			}
		}
	}
}

func TestTerminateFor(t *testing.T) {
	untagged := rdmapHex(t, rreqDDPHex)
	tagged := rdmapHex(t, siwRRespHex)
	rreq := rdmapHex(t, siwRReqHex)
	cases := []struct {
		name       string
		err        iwerr.Error
		ddpH, rdmH []byte
		d, r       bool
	}{
		{"DDP tagged bounds", iwerr.DDPBaseBounds, tagged, nil, true, false},
		{"DDP invalid QN", iwerr.DDPInvalidQN, untagged, nil, true, false},
		{"DDP MSN on a read request", iwerr.DDPInvalidMSNRange, untagged, rreq, true, true},
		{"RDMAP access rights on read", iwerr.RDMAPAccessRights, untagged, rreq, true, true},
		{"RDMAP unexpected opcode", iwerr.RDMAPUnexpectedOpcode, untagged, nil, true, false},
		{"RDMAP catastrophic", iwerr.RDMAPLocalCatastrophicError, untagged, rreq, false, false},
		{"DDP catastrophic", iwerr.DDPLocalCatastrophicError, tagged, nil, false, false},
		{"DDP tagged version", iwerr.DDPTaggedInvalidVersion, tagged, nil, false, false},
		{"DDP untagged version", iwerr.DDPUntaggedInvalidVersion, untagged, nil, false, false},
		{"MPA CRC", iwerr.MPACRCError, untagged, nil, false, false},
		{"short DDP header", iwerr.DDPInvalidQN, untagged[:17], nil, false, false},
		{"tagged bit, untagged length", iwerr.DDPBaseBounds, append(append([]byte{}, tagged...), 0, 0, 0, 0), nil, false, false},
		{"no DDP header", iwerr.RDMAPAccessRights, nil, rreq, false, false},
		{"short RDMAP header", iwerr.RDMAPAccessRights, untagged, rreq[:27], true, false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			term := TerminateFor(c.err, c.ddpH, c.rdmH)
			if term.Err != c.err || term.DDPHeaderIncluded != c.d || term.RDMAPHeaderIncluded != c.r || term.SegLenValid {
				t.Fatalf("TerminateFor = %+v", term)
			}
			term.SetSegmentLength(42)
			b := term.Append(nil)
			got, n, err := ParseTerminate(b)
			if err != nil || n != len(b) || got.SiwLayout || got.Err != c.err {
				t.Fatalf("parse back: %+v, %d, %v", got, n, err)
			}
			if c.d && (got.DDPSegmentLength != 42 || !got.SegLenValid || !bytes.Equal(got.DDPHeader, c.ddpH)) {
				t.Fatalf("DDP part: %+v", got)
			}
			if c.r && !bytes.Equal(got.RDMAPHeader, c.rdmH) {
				t.Fatalf("RDMAP part: %+v", got)
			}
		})
	}
}

// TestTerminateFromCapture reads Linux siw's Terminate out of the capture in
// shared/captures (internal/captures: skipped, saying so, where it is absent) and checks it is
// the termSiwHex golden above, and that the frame's DDP header is a
// Terminate: untagged, L, QN 2, MSN 1, MO 0.
func TestTerminateFromCapture(t *testing.T) {
	data, err := os.ReadFile(captures.File(t, "host-probe-terminate-bounds.pcap"))
	if err != nil {
		t.Fatal(err)
	}
	var found [][]byte
	for _, p := range pcapTCPPayloads(t, data) {
		if len(p) < 2+ddp.UntaggedHeaderLen+TerminateFixedLen {
			continue
		}
		ulpdu := int(binary.BigEndian.Uint16(p[:2]))
		if len(p) < 2+ulpdu || Control(p[3]).Opcode() != OpTerminate {
			continue
		}
		found = append(found, p[2:2+ulpdu])
	}
	if len(found) != 1 {
		t.Fatalf("found %d Terminate FPDUs, want 1", len(found))
	}
	seg := found[0]
	h, hn, err := ddp.Parse(seg)
	if err != nil || h.Tagged || !h.Last || h.QN != QNTerminate || h.MSN != 1 || h.MO != 0 || h.Version != ddp.Version {
		t.Fatalf("Terminate DDP header %+v, %v", h, err)
	}
	if want := rdmapHex(t, termSiwHex); !bytes.Equal(seg[hn:], want) {
		t.Fatalf("capture Terminate %x, golden %x", seg[hn:], want)
	}
	term, n, err := ParseTerminate(seg[hn:])
	if err != nil || n != len(seg)-hn || !term.SiwLayout || term.Err != iwerr.DDPBaseBounds {
		t.Fatalf("ParseTerminate = %+v, %d, %v", term, n, err)
	}
}

// pcapTCPPayloads returns the non-empty TCP payloads of a classic
// little-endian microsecond pcap of Ethernet/IPv4/TCP frames.
func pcapTCPPayloads(t *testing.T, data []byte) [][]byte {
	t.Helper()
	if len(data) < 24 || binary.LittleEndian.Uint32(data) != 0xa1b2c3d4 || binary.LittleEndian.Uint32(data[20:]) != 1 {
		t.Fatalf("not a little-endian Ethernet pcap")
	}
	var out [][]byte
	for off := 24; off+16 <= len(data); {
		incl := int(binary.LittleEndian.Uint32(data[off+8:]))
		off += 16
		if off+incl > len(data) {
			t.Fatalf("truncated record at %d", off)
		}
		f := data[off : off+incl]
		off += incl
		if len(f) < 14+20 || binary.BigEndian.Uint16(f[12:]) != 0x0800 {
			continue
		}
		ip := f[14:]
		ihl := int(ip[0]&0x0f) * 4
		total := int(binary.BigEndian.Uint16(ip[2:]))
		if ip[9] != 6 || total > len(ip) || ihl+20 > total {
			continue
		}
		tcp := ip[ihl:total]
		doff := int(tcp[12]>>4) * 4
		if doff > len(tcp) || doff == len(tcp) {
			continue
		}
		out = append(out, tcp[doff:])
	}
	return out
}

func FuzzParseTerminate(f *testing.F) {
	f.Add(rdmapHex(f, termRFCHex))
	f.Add(rdmapHex(f, termSiwHex))
	f.Add(rdmapHex(f, "01 02 e0 00 0000 "+rreqDDPHex+siwRReqHex))
	f.Add(rdmapHex(f, "01 02 07 00 0000 41430000000000000000 0000000100000000"))
	f.Add([]byte{0x20, 0x06, 0, 0})
	f.Fuzz(func(t *testing.T, b []byte) {
		term, n, err := ParseTerminate(b)
		if err != nil {
			if n != 0 || !errors.Is(err, ErrTerminateTruncated) {
				t.Fatalf("n=%d err=%v", n, err)
			}
			return
		}
		if n > len(b) || n != term.Len() {
			t.Fatalf("n=%d Len=%d len(b)=%d", n, term.Len(), len(b))
		}
		enc := term.Append(nil)
		if !bytes.Equal(enc, b[:n]) {
			t.Fatalf("Append(Parse(%x)) = %x", b[:n], enc)
		}
		again, n2, err := ParseTerminate(enc)
		if err != nil || n2 != n || !terminateEqual(again, term) {
			t.Fatalf("reparse: %+v, %d, %v", again, n2, err)
		}
	})
}
