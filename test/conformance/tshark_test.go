package conformance

import (
	"context"
	"encoding/hex"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/iwarpd/iwarpd/internal/crc32c"
	"github.com/iwarpd/iwarpd/internal/pcapgen"
	"github.com/iwarpd/iwarpd/mpa"
	"github.com/iwarpd/iwarpd/rdmap"
)

// keepEnv names the environment variable that, set to a directory, keeps a
// copy of every generated capture there.
const keepEnv = "IWARPD_KEEP_CAPTURES"

// Expert infos tshark may raise on our captures. Revision 2 trips the two
// RFC 5044 checks (protocol-notes.md §D.2: the RFC 6581 S bit is "Res" to
// Wireshark); TCP notes its normal FIN teardown.
var (
	rev2Warnings = []string{
		"Res field is NOT set to zero as required by RFC 5044",
		"Rev field is NOT set to one as required by RFC 5044",
	}
	tcpNotes = []string{
		"This frame initiates the connection closing",
		"This frame undergoes the connection closing",
	}
)

// writeCapture builds cfg's conversation into a pcap in a temporary
// directory (copied to $IWARPD_KEEP_CAPTURES if set).
func writeCapture(t *testing.T, cfg config) (string, *conversation) {
	t.Helper()
	path := filepath.Join(t.TempDir(), cfg.name+".pcap")
	w, err := pcapgen.Create(path, pcapgen.Options{})
	if err != nil {
		t.Fatal(err)
	}
	c := buildConversation(t, w, cfg)
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	if dir := os.Getenv(keepEnv); dir != "" {
		if err := copyFile(path, filepath.Join(dir, cfg.name+".pcap")); err != nil {
			t.Errorf("%s: %v", keepEnv, err)
		}
	}
	return path, c
}

func copyFile(src, dst string) error {
	if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
		return err
	}
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.Create(dst)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return err
	}
	return out.Close()
}

// fieldList is what the tshark run extracts.
var fieldList = []string{
	"frame.number", "ip.checksum.status", "tcp.checksum.status",
	"iwarp_mpa.key.req", "iwarp_mpa.key.rep", "iwarp_mpa.rev", "iwarp_mpa.crc_flag", "iwarp_mpa.marker_flag",
	"iwarp_mpa.rej_flag", "iwarp_mpa.pdlength", "iwarp_mpa.privatedata",
	"iwarp_mpa.ulpdulength", "iwarp_mpa.pad", "iwarp_mpa.crc", "iwarp_mpa.crc_check",
	"iwarp_mpa.marker_res", "iwarp_mpa.marker_fpduptr",
	"iwarp_ddp.tagged_flag", "iwarp_ddp.last_flag", "iwarp_ddp.rsvd", "iwarp_ddp.dv",
	"iwarp_rdma.version", "iwarp_rdma.rsv", "iwarp_rdma.opcode",
	"iwarp_ddp.qn", "iwarp_ddp.msn", "iwarp_ddp.mo", "iwarp_ddp.stag", "iwarp_ddp.tagged_offset",
	"iwarp_rdma.inval_stag",
	"iwarp_rdma.sinkstag", "iwarp_rdma.sinkto", "iwarp_rdma.rdmardsz", "iwarp_rdma.srcstag", "iwarp_rdma.srcto",
	"iwarp_rdma.term_layer", "iwarp_rdma.term_etype_ddp", "iwarp_rdma.term_errcode_ddp_untagged",
	"iwarp_rdma.term_hdrct_m", "iwarp_rdma.hdrct_d", "iwarp_rdma.hdrct_r", "iwarp_rdma.term_ddp_seg_len", "iwarp_rdma.term_ddp_h",
	"_ws.expert.message", "_ws.expert.severity", "_ws.malformed",
}

func TestTsharkConformance(t *testing.T) {
	tshark, err := FindTshark()
	if err != nil {
		t.Skip(err.Error())
	}
	for _, cfg := range configs {
		t.Run(cfg.name, func(t *testing.T) {
			path, c := writeCapture(t, cfg)
			checkTshark(t, tshark, path, c)
		})
	}
}

// checkTshark runs every tshark check of a capture holding conversation c.
func checkTshark(t reporter, tshark, path string, c *conversation) {
	t.Helper()
	ctx := context.Background()
	rows, err := Fields(ctx, tshark, path, true, fieldList)
	if err != nil {
		t.Fatal(err)
	}
	checkFrames(t, c.cfg, rows)
	checkHandshake(t, c, rows)
	checkFPDUs(t, c, rows)
	checkCRCStatus(t, ctx, tshark, path, c)
	checkExpertSummary(t, ctx, tshark, path, c.cfg)
}

// checkFrames checks what applies to every frame: checksums tshark verified,
// no malformed frame, expert infos within the whitelists.
func checkFrames(t reporter, cfg config, rows []Row) {
	t.Helper()
	for i, r := range rows {
		frame := i + 1
		if got := r["frame.number"]; len(got) != 1 || got[0] != strconv.Itoa(frame) {
			t.Fatalf("row %d has frame.number %v", frame, got)
		}
		for _, f := range []string{"ip.checksum.status", "tcp.checksum.status"} {
			if v := r[f]; len(v) != 1 || v[0] != "1" {
				t.Errorf("frame %d: %s = %v, want Good (1)", frame, f, v)
			}
		}
		if r["_ws.malformed"] != nil {
			t.Errorf("frame %d: malformed %v", frame, r["_ws.malformed"])
		}
		msgs, sevs := r["_ws.expert.message"], r["_ws.expert.severity"]
		if len(msgs) != len(sevs) {
			t.Errorf("frame %d: %d expert messages, %d severities", frame, len(msgs), len(sevs))
			continue
		}
		for j, m := range msgs {
			sev, err := strconv.ParseUint(sevs[j], 0, 32)
			if err != nil {
				t.Errorf("frame %d: expert severity %q: %v", frame, sevs[j], err)
				continue
			}
			switch {
			case sev >= SeverityError:
				t.Errorf("frame %d: expert error %q", frame, m)
			case sev >= SeverityWarn:
				if cfg.rev != 2 || !slices.Contains(rev2Warnings, m) {
					t.Errorf("frame %d: expert warning %q not whitelisted", frame, m)
				}
			case sev >= SeverityNote:
				if !slices.Contains(tcpNotes, m) {
					t.Errorf("frame %d: expert note %q not whitelisted", frame, m)
				}
			}
		}
	}
}

// collect concatenates the occurrences of field over all frames.
func collect(rows []Row, field string) []string {
	var out []string
	for _, r := range rows {
		out = append(out, r[field]...)
	}
	return out
}

// framesWith returns the indices of the rows where field occurs.
func framesWith(rows []Row, field string) []int {
	var out []int
	for i, r := range rows {
		if r[field] != nil {
			out = append(out, i)
		}
	}
	return out
}

// checkNumbers compares the occurrences of field with want numerically
// (tshark prints some fields in decimal, some in hex).
func checkNumbers(t reporter, rows []Row, field string, want []uint64) {
	t.Helper()
	got := collect(rows, field)
	if len(got) != len(want) {
		t.Errorf("%s: tshark decoded %d values, we encoded %d\n got %v\nwant %v", field, len(got), len(want), got, want)
		return
	}
	for i, s := range got {
		v, err := strconv.ParseUint(s, 0, 64)
		if err != nil {
			t.Errorf("%s[%d] = %q: %v", field, i, s, err)
			continue
		}
		if v != want[i] {
			t.Errorf("%s[%d] = %#x, want %#x", field, i, v, want[i])
		}
	}
}

// checkHex compares byte-string occurrences of field with want.
func checkHex(t reporter, rows []Row, field string, want [][]byte) {
	t.Helper()
	got := collect(rows, field)
	if len(got) != len(want) {
		t.Errorf("%s: tshark decoded %d values, we encoded %d", field, len(got), len(want))
		return
	}
	for i, s := range got {
		b, err := hex.DecodeString(strings.ReplaceAll(s, ":", ""))
		if err != nil {
			t.Errorf("%s[%d] = %q: %v", field, i, s, err)
			continue
		}
		if string(b) != string(want[i]) {
			t.Errorf("%s[%d] = %x, want %x", field, i, b, want[i])
		}
	}
}

func b2u(b bool) uint64 {
	if b {
		return 1
	}
	return 0
}

// checkHandshake checks the MPA Request and Reply as tshark decoded them.
func checkHandshake(t reporter, c *conversation, rows []Row) {
	t.Helper()
	req, rep := framesWith(rows, "iwarp_mpa.key.req"), framesWith(rows, "iwarp_mpa.key.rep")
	if len(req) != 1 || len(rep) != 1 || req[0] >= rep[0] {
		t.Fatalf("MPA Request in frames %v, Reply in frames %v; want one each, Request first", req, rep)
	}
	cfg := c.cfg
	checkNumbers(t, rows, "iwarp_mpa.rev", []uint64{uint64(cfg.rev), uint64(cfg.rev)})
	checkNumbers(t, rows, "iwarp_mpa.crc_flag", []uint64{b2u(cfg.crc), b2u(cfg.crc)})
	checkNumbers(t, rows, "iwarp_mpa.marker_flag", []uint64{b2u(cfg.markers), b2u(cfg.markers)})
	checkNumbers(t, rows, "iwarp_mpa.rej_flag", []uint64{0, 0})
	reqPD, repPD := c.reqWire[mpa.FrameHeaderLen:], c.repWire[mpa.FrameHeaderLen:]
	checkNumbers(t, rows, "iwarp_mpa.pdlength", []uint64{uint64(len(reqPD)), uint64(len(repPD))})
	if cfg.rev == 1 {
		if pd := collect(rows, "iwarp_mpa.privatedata"); len(pd) != 0 {
			t.Errorf("revision 1 frames carry private data %v", pd)
		}
		return
	}
	checkHex(t, rows, "iwarp_mpa.privatedata", [][]byte{reqPD, repPD})
	// tshark does not decode the RFC 6581 block: decode what it shows.
	for i, s := range collect(rows, "iwarp_mpa.privatedata") {
		b, err := hex.DecodeString(s)
		if err != nil {
			t.Fatal(err)
		}
		e, rest, err := mpa.ParseEnhanced(b)
		if err != nil {
			t.Errorf("private data %d: %v", i, err)
			continue
		}
		if e.IRD != 16 || e.ORD != 16 || !e.PeerToPeer || !e.WriteRTR || e.ReadRTR || e.SendRTR || len(rest) != 0 {
			t.Errorf("private data %d: %+v (+%d octets), want IRD=ORD=16, P2P, Write RTR only", i, e, len(rest))
		}
	}
}

// checkFPDUs checks that tshark found every FPDU we wrote, with the fields we
// encoded, in order.
func checkFPDUs(t reporter, c *conversation, rows []Row) {
	t.Helper()
	var (
		ulpduLen, tagged, last, dv, rv, opcode       []uint64
		qn, msn, mo, stag, to, inval, fpduptr, mres  []uint64
		sinkStag, sinkTO, size, srcStag, srcTO       []uint64
		tLayer, tEType, tECode, tM, tD, tR, crcZeros []uint64
		pads, termHdrs, termSegLens                  [][]byte
	)
	for _, r := range c.fpdus {
		h := r.hdr
		ulpduLen = append(ulpduLen, uint64(len(r.ulpdu)))
		tagged = append(tagged, b2u(h.Tagged))
		last = append(last, b2u(h.Last))
		dv = append(dv, uint64(h.Version))
		rv = append(rv, uint64(rdmap.Control(h.ULPControl).Version()))
		opcode = append(opcode, uint64(r.opcode()))
		if h.Tagged {
			stag = append(stag, uint64(h.Stag))
			to = append(to, h.TO)
		} else {
			qn = append(qn, uint64(h.QN))
			msn = append(msn, uint64(h.MSN))
			mo = append(mo, uint64(h.MO))
		}
		if op := r.opcode(); op == rdmap.OpSendInvalidate || op == rdmap.OpSendSEInvalidate {
			inval = append(inval, uint64(h.ULPReserved))
		}
		if p := mpa.PadLen(len(r.ulpdu)); p > 0 {
			pads = append(pads, make([]byte, p))
		}
		for _, m := range r.markers {
			fpduptr = append(fpduptr, uint64(m))
			mres = append(mres, 0)
		}
		if rr := r.rr; rr != nil {
			sinkStag = append(sinkStag, uint64(rr.SinkStag))
			sinkTO = append(sinkTO, rr.SinkTO)
			size = append(size, uint64(rr.Size))
			srcStag = append(srcStag, uint64(rr.SourceStag))
			srcTO = append(srcTO, rr.SourceTO)
		}
		if r.hasTerm {
			tLayer = append(tLayer, uint64(r.termCode.Layer))
			tEType = append(tEType, uint64(r.termCode.Type))
			tECode = append(tECode, uint64(r.termCode.Code))
			tM, tD, tR = append(tM, 1), append(tD, 1), append(tR, 0)
			termHdrs = append(termHdrs, r.termHdr)
			termSegLens = append(termSegLens, []byte{byte(r.termSegLen >> 8), byte(r.termSegLen)})
		}
		crcZeros = append(crcZeros, 0)
	}
	checkNumbers(t, rows, "iwarp_mpa.ulpdulength", ulpduLen)
	checkNumbers(t, rows, "iwarp_ddp.tagged_flag", tagged)
	checkNumbers(t, rows, "iwarp_ddp.last_flag", last)
	checkNumbers(t, rows, "iwarp_ddp.dv", dv)
	checkNumbers(t, rows, "iwarp_ddp.rsvd", make([]uint64, len(dv)))
	checkNumbers(t, rows, "iwarp_rdma.version", rv)
	checkNumbers(t, rows, "iwarp_rdma.rsv", make([]uint64, len(rv)))
	checkNumbers(t, rows, "iwarp_rdma.opcode", opcode)
	checkNumbers(t, rows, "iwarp_ddp.qn", qn)
	checkNumbers(t, rows, "iwarp_ddp.msn", msn)
	checkNumbers(t, rows, "iwarp_ddp.mo", mo)
	checkNumbers(t, rows, "iwarp_ddp.stag", stag)
	checkNumbers(t, rows, "iwarp_ddp.tagged_offset", to)
	checkNumbers(t, rows, "iwarp_rdma.inval_stag", inval)
	checkNumbers(t, rows, "iwarp_rdma.sinkstag", sinkStag)
	checkNumbers(t, rows, "iwarp_rdma.sinkto", sinkTO)
	checkNumbers(t, rows, "iwarp_rdma.rdmardsz", size)
	checkNumbers(t, rows, "iwarp_rdma.srcstag", srcStag)
	checkNumbers(t, rows, "iwarp_rdma.srcto", srcTO)
	checkNumbers(t, rows, "iwarp_rdma.term_layer", tLayer)
	checkNumbers(t, rows, "iwarp_rdma.term_etype_ddp", tEType)
	checkNumbers(t, rows, "iwarp_rdma.term_errcode_ddp_untagged", tECode)
	checkNumbers(t, rows, "iwarp_rdma.term_hdrct_m", tM)
	checkNumbers(t, rows, "iwarp_rdma.hdrct_d", tD)
	checkNumbers(t, rows, "iwarp_rdma.hdrct_r", tR)
	checkHex(t, rows, "iwarp_rdma.term_ddp_h", termHdrs)
	// 4.0 shows the DDP Segment Length as a byte string.
	checkHex(t, rows, "iwarp_rdma.term_ddp_seg_len", termSegLens)
	checkHex(t, rows, "iwarp_mpa.pad", pads)
	checkNumbers(t, rows, "iwarp_mpa.marker_fpduptr", fpduptr)
	checkNumbers(t, rows, "iwarp_mpa.marker_res", mres)
	if c.cfg.crc {
		if n := len(collect(rows, "iwarp_mpa.crc_check")); n != len(c.fpdus) {
			t.Errorf("tshark checked %d CRCs, we wrote %d FPDUs", n, len(c.fpdus))
		}
		// The displayed value is the wire octets read big-endian.
		var want []uint64
		for _, r := range c.fpdus {
			want = append(want, uint64(crc32c.Get(r.wire[len(r.wire)-crc32c.Size:])))
		}
		got := collect(rows, "iwarp_mpa.crc_check")
		for i := range min(len(got), len(want)) {
			v, _ := strconv.ParseUint(got[i], 0, 32)
			if bswap32(uint32(v)) != uint32(want[i]) {
				t.Errorf("FPDU %d (%v): tshark CRC %s, we sent %#08x", i, c.fpdus[i], got[i], want[i])
			}
		}
	} else {
		if n := len(collect(rows, "iwarp_mpa.crc_check")); n != 0 {
			t.Errorf("tshark checked %d CRCs although CRC is off", n)
		}
		checkNumbers(t, rows, "iwarp_mpa.crc", crcZeros)
	}
	if t.Failed() {
		for i, r := range c.fpdus {
			t.Logf("FPDU %d: %v markers %v", i, r, r.markers)
		}
	}
}

func bswap32(v uint32) uint32 { return v>>24 | v>>8&0xff00 | v<<8&0xff0000 | v<<24 }

// checkCRCStatus reads tshark's verdict on each CRC (only shown in the
// field's display text, hence PDML).
func checkCRCStatus(t reporter, ctx context.Context, tshark, path string, c *conversation) {
	t.Helper()
	if !c.cfg.crc {
		return
	}
	frames, err := Shownames(ctx, tshark, path, true, "iwarp_mpa.crc_check")
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for i, names := range frames {
		for _, s := range names {
			n++
			if !strings.Contains(s, "(Good CRC32)") {
				t.Errorf("frame %d: %q", i+1, s)
			}
		}
	}
	if n != len(c.fpdus) {
		t.Errorf("PDML shows %d CRC checks, we wrote %d FPDUs", n, len(c.fpdus))
	}
}

// checkExpertSummary runs `tshark -z expert` (single pass, which also shows
// the MPA Request/Reply warnings) and checks it against the whitelists.
func checkExpertSummary(t reporter, ctx context.Context, tshark, path string, cfg config) {
	t.Helper()
	entries, report, err := Expert(ctx, tshark, path)
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]int{}
	for _, e := range entries {
		switch e.Severity {
		case "Errors":
			t.Errorf("expert error: %+v", e)
		case "Warns":
			if cfg.rev != 2 || e.Protocol != "IWARP_MPA" || !slices.Contains(rev2Warnings, e.Summary) {
				t.Errorf("expert warning not whitelisted: %+v", e)
			}
			seen[e.Summary] += e.Count
		case "Notes":
			if e.Protocol != "TCP" || !slices.Contains(tcpNotes, e.Summary) {
				t.Errorf("expert note not whitelisted: %+v", e)
			}
		}
	}
	if cfg.rev == 2 {
		// One of each on the Request and on the Reply: proof both were seen.
		for _, w := range rev2Warnings {
			if seen[w] != 2 {
				t.Errorf("expected warning %q twice (Request and Reply), got %d", w, seen[w])
			}
		}
	}
	if t.Failed() {
		t.Logf("tshark -z expert:\n%s", report)
	}
}
