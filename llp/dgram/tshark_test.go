package dgram

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/gopacket"
	"github.com/google/gopacket/layers"
	"github.com/google/gopacket/pcapgo"

	"github.com/iwarpd/iwarpd/ddp"
	"github.com/iwarpd/iwarpd/internal/testwait"
	"github.com/iwarpd/iwarpd/rdmap"
)

// A conformance check of the profile against Wireshark: datagrams built by
// this package are written to a pcap, decoded by tshark with the project's
// Lua dissector (contrib/wireshark/iwarp-datagram.lua) handing the DDP part
// to Wireshark's own iwarp_ddp_rdmap, and every decoded field is compared
// with what was sent.

const luaDissector = "../../contrib/wireshark/iwarp-datagram.lua"

// want is what tshark must report for one frame; "" fields must be absent.
type want struct {
	opcode   string // iwarp_rdma.opcode, e.g. "0x03"
	qn, msn  string
	mo       string
	stag, to string
	crc      string // iwarp_dgram.crc.status: 1 good, 0 bad
	rdType   string
	seq      string
	cumack   string
	recordID string
	imm      string // iwarp_dgram.imm.value (Send with Immediate)
	expert   string // expected _ws.expert.message substring ("" = none)
}

type frame struct {
	src, dst uint16
	payload  []byte
	want     want
}

// capture builds the frames of the conformance capture.
func capture(t *testing.T) []frame {
	t.Helper()
	var fs []frame
	add := func(src, dst uint16, b []byte, w want) {
		fs = append(fs, frame{src, dst, b, w})
	}
	const ud1, ud2, rd1, rd2 = 17000, 17001, 17500, 17501

	// The golden datagrams.
	gold := map[string][]byte{}
	for _, g := range goldens {
		gold[g.name] = g.build()
	}
	add(ud1, ud2, gold["ud-send-hello"], want{opcode: "0x03", qn: "0", msn: "1", mo: "0", crc: "1"})
	add(ud1, ud2, gold["ud-send-se-seg1"], want{opcode: "0x05", qn: "0", msn: "2", mo: "0", crc: "1"})
	add(ud1, ud2, gold["ud-send-se-seg2"], want{opcode: "0x05", qn: "0", msn: "2", mo: "8", crc: "1"})
	add(rd1, rd2, gold["rd-data-ack-sack"], want{opcode: "0x03", qn: "0", msn: "1", mo: "0", crc: "1", rdType: "1", seq: "7", cumack: "5"})
	add(rd2, rd1, gold["rd-ack-notready"], want{crc: "1", rdType: "2", seq: "0", cumack: "8"})
	add(ud1, ud2, gold["ud-write-record"], want{opcode: "0x0c", stag: "0x00012300", to: "0x0000000000010006", crc: "1", recordID: "9"})
	add(ud1, ud2, gold["ud-write-record-imm"], want{opcode: "0x0d", stag: "0x00012300", to: "0x0000000000010006", crc: "1", recordID: "9",
		imm: "0xcafef00d"})
	add(ud2, ud1, gold["ud-error-invalid-qn"], want{opcode: "0x07", qn: "2", msn: "1", mo: "0", crc: "1"})

	// A 3000-octet UD Send segmented at the default datagram size.
	msg := make([]byte, 3000)
	for i := range msg {
		msg[i] = byte(i*7 + 3)
	}
	per := MaxSegment(DefaultDatagramSize, false) - ddp.UntaggedHeaderLen
	for mo := 0; mo < len(msg); mo += per {
		end := min(mo+per, len(msg))
		b := AppendUD(nil, goldenKeys, true, untagged(rdmap.OpSend, end == len(msg), 0, 3, uint32(mo)), msg[mo:end])
		if len(b) > DefaultDatagramSize {
			t.Fatalf("segment datagram of %d octets", len(b))
		}
		add(ud1, ud2, b, want{opcode: "0x03", qn: "0", msn: "3", mo: fmt.Sprint(mo), crc: "1"})
	}

	// An RD exchange: a Read Request, its two-segment Read Response with
	// piggybacked acks, and the final ack.
	a := RDHeader{Version: RDVersion, Type: RDData, Window: 256, Incarnation: 0xa1a1a1a1, Seq: 1}
	rr := binaryReadRequest(0x100, 0x2000, 2000, 0x200, 0x8000)
	add(rd1, rd2, AppendRD(nil, goldenKeys, &a, true, untagged(rdmap.OpReadRequest, true, rdmap.QNReadRequest, 1, 0), rr),
		want{opcode: "0x01", qn: "1", msn: "1", mo: "0", crc: "1", rdType: "1", seq: "1", cumack: "0"})
	b := RDHeader{Version: RDVersion, Type: RDData, Flags: FlagAck, Window: 256, Incarnation: 0xb2b2b2b2,
		EchoedIncarnation: 0xa1a1a1a1, Seq: 1, CumAck: 2}
	per = MaxSegment(DefaultDatagramSize, true) - ddp.TaggedHeaderLen
	data := bytes.Repeat([]byte{0x5a}, 2000)
	for off := 0; off < len(data); off += per {
		end := min(off+per, len(data))
		h := b
		if end == len(data) {
			h.Flags |= FlagAckReq
		}
		to := uint64(0x2000 + off)
		add(rd2, rd1, AppendRD(nil, goldenKeys, &h, true, tagged(rdmap.OpReadResponse, end == len(data), 0x100, to), data[off:end]),
			want{opcode: "0x02", stag: "0x00000100", to: fmt.Sprintf("0x%016x", to), crc: "1", rdType: "1",
				seq: fmt.Sprint(b.Seq), cumack: "2"})
		b.Seq++
	}
	ack := RDHeader{Version: RDVersion, Type: RDAck, Flags: FlagAck, Window: 256, Incarnation: 0xa1a1a1a1,
		EchoedIncarnation: 0xb2b2b2b2, CumAck: 3}
	add(rd1, rd2, AppendRD(nil, goldenKeys, &ack, true), want{crc: "1", rdType: "2", seq: "0", cumack: "3"})
	// A SACK Block ACK (§7.1): Seq is the base of its bitmap.
	block := RDHeader{Version: RDVersion, Type: RDAck, Flags: FlagAck | FlagExtSACK | FlagSACKBlock, Window: 1024,
		Incarnation: 0xa1a1a1a1, EchoedIncarnation: 0xb2b2b2b2, Seq: 40, CumAck: 3, SACK: 0x0000ffff}
	add(rd1, rd2, AppendRD(nil, goldenKeys, &block, true), want{crc: "1", rdType: "2", seq: "40", cumack: "3"})

	// A two-segment Write-Record of 1500 octets, record 77.
	rec := bytes.Repeat([]byte("write-record "), 116)[:1500]
	per = MaxSegment(DefaultDatagramSize, false) - ddp.TaggedHeaderLen - rdmap.WriteRecordLen
	for off := 0; off < len(rec); off += per {
		end := min(off+per, len(rec))
		wr := rdmap.WriteRecord{RecordID: 77, MessageLength: uint32(len(rec)), MessageOffset: uint32(off)}
		to := uint64(0x40000 + off)
		add(ud1, ud2, AppendUD(nil, goldenKeys, true, tagged(rdmap.OpWriteRecord, end == len(rec), 0xabcd, to), wr.Append(nil), rec[off:end]),
			want{opcode: "0x0c", stag: "0x0000abcd", to: fmt.Sprintf("0x%016x", to), crc: "1", recordID: "77"})
	}

	// A two-segment Write-Record with Immediate over RD (opcode 0xD: the
	// Write-Record header, then the Immediate Data, in every segment).
	per = MaxSegment(DefaultDatagramSize, true) - ddp.TaggedHeaderLen - rdmap.WriteRecordImmLen
	wh := RDHeader{Version: RDVersion, Type: RDData, Window: 256, Incarnation: 0xc3c3c3c3, Seq: 1}
	for off := 0; off < len(rec); off += per {
		end := min(off+per, len(rec))
		wr := rdmap.WriteRecordImm{WriteRecord: rdmap.WriteRecord{RecordID: 78, MessageLength: uint32(len(rec)), MessageOffset: uint32(off)},
			Imm: rdmap.MakeImmediateData(0x01020304)}
		to := uint64(0x50000 + off)
		b := AppendRD(nil, goldenKeys, &wh, true, tagged(rdmap.OpWriteRecordImm, end == len(rec), 0xabcd, to), wr.Append(nil), rec[off:end])
		if len(b) > DefaultDatagramSize {
			t.Fatalf("Write-Record with Immediate datagram of %d octets", len(b))
		}
		add(rd1, rd2, b, want{opcode: "0x0d", stag: "0x0000abcd", to: fmt.Sprintf("0x%016x", to), crc: "1", rdType: "1",
			seq: fmt.Sprint(wh.Seq), cumack: "0", recordID: "78", imm: "0x01020304"})
		wh.Seq++
	}

	// RFC 7306 (docs/atomics.md): a UD Send with Immediate (its 8 octets
	// before the payload, decoded by the Lua dissector), an RD Atomic
	// Request and its Atomic Response (decoded by Wireshark's own
	// iwarp_ddp_rdmap, checked by the Lua dissector).
	imm := rdmap.MakeImmediateData(0xcafef00d)
	add(ud1, ud2, AppendUD(nil, goldenKeys, true, untagged(rdmap.OpImmediateData, true, 0, 5, 0), imm.Append(nil), []byte("with imm")),
		want{opcode: "0x08", qn: "0", msn: "5", mo: "0", crc: "1", imm: "0xcafef00d"})
	ar := rdmap.AtomicRequest{Op: rdmap.AtomicFetchAdd, ReqID: 3, Stag: 0x300, TO: 0x9000, AddSwap: 1}
	areq := RDHeader{Version: RDVersion, Type: RDData, Window: 256, Incarnation: 0xa1a1a1a1, Seq: 2}
	add(rd1, rd2, AppendRD(nil, goldenKeys, &areq, true, untagged(rdmap.OpAtomicRequest, true, rdmap.QNReadRequest, 2, 0), ar.Append(nil)),
		want{opcode: "0x0a", qn: "1", msn: "2", mo: "0", crc: "1", rdType: "1", seq: "2", cumack: "0"})
	resp := rdmap.AtomicResponse{ReqID: 3, Original: 41}
	aresp := RDHeader{Version: RDVersion, Type: RDData, Window: 256, Incarnation: 0xb2b2b2b2, Seq: 3}
	add(rd2, rd1, AppendRD(nil, goldenKeys, &aresp, true, untagged(rdmap.OpAtomicResponse, true, rdmap.QNAtomicResponse, 1, 0), resp.Append(nil)),
		want{opcode: "0x0b", qn: "3", msn: "1", mo: "0", crc: "1", rdType: "1", seq: "3", cumack: "0"})

	// A UD datagram with CRC off (trailer 0): not checked, no expert.
	add(ud1, ud2, AppendUD(nil, goldenKeys, false, untagged(rdmap.OpSend, true, 0, 4, 0), []byte("no crc")),
		want{opcode: "0x03", qn: "0", msn: "4", mo: "0", crc: "2"})

	// The hello golden with one payload bit flipped: flagged bad CRC.
	bad := bytes.Clone(gold["ud-send-hello"])
	bad[28] ^= 0x01 // a payload octet
	add(ud1, ud2, bad, want{opcode: "0x03", qn: "0", msn: "1", mo: "0", crc: "0", expert: "Bad CRC32c"})
	return fs
}

func binaryReadRequest(sinkStag uint32, sinkTO uint64, size, srcStag uint32, srcTO uint64) []byte {
	h := ddp.Header{Tagged: true, Stag: sinkStag, TO: sinkTO} // reuse the tagged encoder for STag|TO
	b := h.Append(nil)[2:]
	b = append(b, byte(size>>24), byte(size>>16), byte(size>>8), byte(size))
	s := ddp.Header{Tagged: true, Stag: srcStag, TO: srcTO}
	return append(b, s.Append(nil)[2:]...)
}

func writePcap(t *testing.T, path string, fs []frame) {
	t.Helper()
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	w := pcapgo.NewWriter(f)
	if err := w.WriteFileHeader(65536, layers.LinkTypeEthernet); err != nil {
		t.Fatal(err)
	}
	for i, fr := range fs {
		eth := &layers.Ethernet{SrcMAC: net.HardwareAddr{2, 0, 0, 0, 0, 1}, DstMAC: net.HardwareAddr{2, 0, 0, 0, 0, 2},
			EthernetType: layers.EthernetTypeIPv4}
		ip := &layers.IPv4{Version: 4, TTL: 64, Protocol: layers.IPProtocolUDP, Id: uint16(i),
			SrcIP: net.IPv4(10, 0, 0, 1), DstIP: net.IPv4(10, 0, 0, 2)}
		if fr.src > fr.dst {
			ip.SrcIP, ip.DstIP = ip.DstIP, ip.SrcIP
		}
		udp := &layers.UDP{SrcPort: layers.UDPPort(fr.src), DstPort: layers.UDPPort(fr.dst)}
		if err := udp.SetNetworkLayerForChecksum(ip); err != nil {
			t.Fatal(err)
		}
		buf := gopacket.NewSerializeBuffer()
		opts := gopacket.SerializeOptions{FixLengths: true, ComputeChecksums: true}
		if err := gopacket.SerializeLayers(buf, opts, eth, ip, udp, gopacket.Payload(fr.payload)); err != nil {
			t.Fatal(err)
		}
		data := buf.Bytes()
		ci := gopacket.CaptureInfo{Timestamp: time.Unix(1700000000, int64(i)*1000), CaptureLength: len(data), Length: len(data)}
		if err := w.WritePacket(ci, data); err != nil {
			t.Fatal(err)
		}
	}
}

var tsharkFields = []string{
	"frame.number", "iwarp_dgram.framing", "iwarp_dgram.qkey", "iwarp_dgram.src_qkey", "iwarp_rdma.opcode", "iwarp_ddp.qn", "iwarp_ddp.msn", "iwarp_ddp.mo",
	"iwarp_ddp.stag", "iwarp_ddp.tagged_offset", "iwarp_dgram.crc.status", "iwarp_dgram.rd.type",
	"iwarp_dgram.rd.seq", "iwarp_dgram.rd.cumack", "iwarp_dgram.wr.record_id", "iwarp_dgram.imm.value", "_ws.expert.message",
	"_ws.malformed", "_ws.lua.error", "_ws.col.Info",
}

// runTshark decodes path with the Lua dissector and returns one map of
// field → value per frame.
func runTshark(t *testing.T, path string, extra ...string) []map[string]string {
	t.Helper()
	tshark, err := exec.LookPath("tshark")
	if err != nil {
		t.Skip("tshark not installed (apt-get install tshark): skipping the Wireshark conformance check")
	}
	lua, err := filepath.Abs(luaDissector)
	if err != nil {
		t.Fatal(err)
	}
	args := []string{"-r", path, "-X", "lua_script:" + lua,
		"--disable-protocol", "rpcordma", "--disable-protocol", "smb_direct",
		"-T", "fields", "-E", "separator=/t", "-E", "occurrence=a", "-E", "aggregator=,"}
	args = append(args, extra...)
	for _, f := range tsharkFields {
		args = append(args, "-e", f)
	}
	ctx, cancel := context.WithTimeout(context.Background(), testwait.Scaled(120*time.Second))
	defer cancel()
	cmd := exec.CommandContext(ctx, tshark, args...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("tshark: %v\n%s", err, stderr.String())
	}
	// tshark warns about running as root; anything about Lua is a failure.
	if s := stderr.String(); strings.Contains(strings.ToLower(s), "lua") {
		t.Fatalf("tshark stderr mentions Lua:\n%s", s)
	}
	var rows []map[string]string
	for _, line := range strings.Split(strings.TrimRight(stdout.String(), "\n"), "\n") {
		cols := strings.Split(line, "\t")
		if len(cols) != len(tsharkFields) {
			t.Fatalf("tshark line has %d columns, want %d: %q", len(cols), len(tsharkFields), line)
		}
		row := map[string]string{}
		for i, f := range tsharkFields {
			row[f] = cols[i]
		}
		rows = append(rows, row)
	}
	return rows
}

func TestTshark(t *testing.T) {
	if _, err := exec.LookPath("tshark"); err != nil {
		t.Skip("tshark not installed (apt-get install tshark): skipping the Wireshark conformance check")
	}
	fs := capture(t)
	path := filepath.Join(t.TempDir(), "dgram.pcap")
	writePcap(t, path, fs)
	rows := runTshark(t, path)
	if len(rows) != len(fs) {
		t.Fatalf("tshark decoded %d frames, want %d", len(rows), len(fs))
	}
	first := func(s string) string { // one value even if a field repeats
		v, _, _ := strings.Cut(s, ",")
		return v
	}
	for i, fr := range fs {
		r := rows[i]
		w := fr.want
		label := fmt.Sprintf("frame %d (%s)", i+1, r["_ws.col.Info"])
		wantFraming := "0"
		if fr.src >= DefaultRDPorts.First {
			wantFraming = "1"
		}
		keys, _ := ParseKeys(fr.payload)
		checks := []struct{ field, want string }{
			{"iwarp_dgram.framing", wantFraming},
			{"iwarp_dgram.qkey", fmt.Sprintf("0x%08x", keys.QKey)},
			{"iwarp_dgram.src_qkey", fmt.Sprintf("0x%08x", keys.SrcQKey)},
			{"iwarp_rdma.opcode", w.opcode},
			{"iwarp_ddp.qn", w.qn},
			{"iwarp_ddp.msn", w.msn},
			{"iwarp_ddp.mo", w.mo},
			{"iwarp_ddp.stag", w.stag},
			{"iwarp_ddp.tagged_offset", w.to},
			{"iwarp_dgram.crc.status", w.crc},
			{"iwarp_dgram.rd.type", w.rdType},
			{"iwarp_dgram.rd.seq", w.seq},
			{"iwarp_dgram.rd.cumack", w.cumack},
			{"iwarp_dgram.wr.record_id", w.recordID},
			{"iwarp_dgram.imm.value", w.imm},
		}
		for _, c := range checks {
			if got := first(r[c.field]); got != c.want {
				t.Errorf("%s: %s = %q, want %q", label, c.field, r[c.field], c.want)
			}
		}
		if r["_ws.malformed"] != "" || r["_ws.lua.error"] != "" {
			t.Errorf("%s: malformed %q, Lua error %q", label, r["_ws.malformed"], r["_ws.lua.error"])
		}
		if w.expert == "" && r["_ws.expert.message"] != "" {
			t.Errorf("%s: unexpected expert info %q", label, r["_ws.expert.message"])
		}
		if w.expert != "" && !strings.Contains(r["_ws.expert.message"], w.expert) {
			t.Errorf("%s: expert info %q, want %q", label, r["_ws.expert.message"], w.expert)
		}
	}
}

// TestTsharkPortPreference: the port ranges are preferences; a UD datagram
// on other ports is decoded only when they are configured.
func TestTsharkPortPreference(t *testing.T) {
	if _, err := exec.LookPath("tshark"); err != nil {
		t.Skip("tshark not installed (apt-get install tshark): skipping the Wireshark conformance check")
	}
	path := filepath.Join(t.TempDir(), "ports.pcap")
	writePcap(t, path, []frame{{src: 7001, dst: 7002, payload: goldens[0].build()}})
	if r := runTshark(t, path); r[0]["iwarp_dgram.framing"] != "" {
		t.Fatalf("decoded on port 7001 without the preference: %v", r[0])
	}
	r := runTshark(t, path, "-o", "iwarp_dgram.ud_ports:7001-7002")
	if r[0]["iwarp_dgram.framing"] != "0" || r[0]["iwarp_ddp.msn"] != "1" || r[0]["iwarp_dgram.crc.status"] != "1" {
		t.Fatalf("not decoded with iwarp_dgram.ud_ports set: %v", r[0])
	}
}
