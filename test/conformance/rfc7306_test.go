package conformance

import (
	"context"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/iwarpd/iwarpd/internal/pcapgen"
	"github.com/iwarpd/iwarpd/rdmap"
)

// The RFC 7306 conversation: FetchAdd and CmpSwap Atomic Requests (QN 1)
// and their Atomic Responses (QN 3), an RDMA Write followed by Immediate
// Data, a Send followed by Immediate Data with Solicited Event (QN 0), as
// the daemon emits them (verbsd rc_atomic.go).
var (
	rfc7306FetchAdd = rdmap.AtomicRequest{Op: rdmap.AtomicFetchAdd, ReqID: 1, Stag: 0x1a05, TO: 0x7f0000001000, AddSwap: 1}
	rfc7306CmpSwap  = rdmap.AtomicRequest{Op: rdmap.AtomicCmpSwap, ReqID: 2, Stag: 0x1a05, TO: 0x7f0000001008,
		AddSwap: 0x1122334455667788, AddSwapMask: ^uint64(0), Compare: 42, CompareMask: ^uint64(0)}
)

func writeRFC7306Capture(t *testing.T, cfg config) (string, *conversation) {
	t.Helper()
	path := filepath.Join(t.TempDir(), cfg.name+"-rfc7306.pcap")
	w, err := pcapgen.Create(path, pcapgen.Options{})
	if err != nil {
		t.Fatal(err)
	}
	c := newConversation(t, w, cfg)
	if cfg.rev == 2 {
		c.tagged(client, rdmap.OpWrite, 1, 0, nil) // the RTR
		c.flush(client)
	}
	for _, r := range []rdmap.AtomicRequest{rfc7306FetchAdd, rfc7306CmpSwap} {
		c.untagged(client, rdmap.OpAtomicRequest, rdmap.QNReadRequest, 0, r.Append(nil), nil)
		c.flush(client)
		resp := rdmap.AtomicResponse{ReqID: r.ReqID, Original: 41}
		c.untagged(server, rdmap.OpAtomicResponse, rdmap.QNAtomicResponse, 0, resp.Append(nil), nil)
		c.flush(server)
	}
	imm := rdmap.MakeImmediateData(0xdeadbeef)
	c.tagged(client, rdmap.OpWrite, 0x1a05, 0x7f0000002000, pattern(3000, 7))
	c.untagged(client, rdmap.OpImmediateData, rdmap.QNSend, 0, imm.Append(nil), nil)
	c.send(client, rdmap.OpSend, 0, pattern(100, 8))
	imm2 := rdmap.MakeImmediateData(7)
	c.untagged(client, rdmap.OpImmediateDataSE, rdmap.QNSend, 0, imm2.Append(nil), nil)
	c.flush(client)
	if err := c.tcp.Close(server); err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	return path, c
}

var rfc7306Fields = []string{
	"frame.number", "ip.checksum.status", "tcp.checksum.status",
	"iwarp_rdma.opcode", "iwarp_ddp.qn", "iwarp_ddp.msn",
	"iwarp_rdma.atomic.opcode", "iwarp_rdma.atomic.request_identifier", "iwarp_rdma.atomic.remote_stag",
	"iwarp_rdma.atomic.remote_tagged_offset", "iwarp_rdma.atomic.add_data", "iwarp_rdma.atomic.swap_data",
	"iwarp_rdma.atomic.compare_data", "iwarp_rdma.atomic.compare_mask",
	"iwarp_rdma.atomic.original_request_identifier", "iwarp_rdma.atomic.original_remote_data_value",
	"_ws.expert.message", "_ws.expert.severity", "_ws.malformed",
}

// TestTsharkRFC7306: Wireshark 4.0's iwarp_ddp_rdmap dissector knows the
// RFC 7306 Atomic Request and Response (iwarp_rdma.atomic.*: it decodes
// our FetchAdd and CmpSwap field by field) but not Immediate Data (opcode
// 0x8/0x9 shows as an unknown opcode, its QN/MSN decoded); no frame of the
// conversation is malformed or carries an expert error, and every MPA CRC
// checks.
func TestTsharkRFC7306(t *testing.T) {
	tshark, err := FindTshark()
	if err != nil {
		t.Skip(err.Error())
	}
	for _, cfg := range configs[:3] {
		t.Run(cfg.name, func(t *testing.T) {
			path, c := writeRFC7306Capture(t, cfg)
			ctx := context.Background()
			rows, err := Fields(ctx, tshark, path, true, rfc7306Fields)
			if err != nil {
				t.Fatal(err)
			}
			checkFrames(t, cfg, rows)
			want := map[string][]string{
				"iwarp_rdma.atomic.opcode":                      {"0", "2"},
				"iwarp_rdma.atomic.request_identifier":          {"1", "2"},
				"iwarp_rdma.atomic.remote_stag":                 {"6661", "6661"},
				"iwarp_rdma.atomic.remote_tagged_offset":        {strconv.FormatUint(rfc7306FetchAdd.TO, 10), strconv.FormatUint(rfc7306CmpSwap.TO, 10)},
				"iwarp_rdma.atomic.add_data":                    {"1"},
				"iwarp_rdma.atomic.swap_data":                   {strconv.FormatUint(rfc7306CmpSwap.AddSwap, 10)},
				"iwarp_rdma.atomic.compare_data":                {"0", "42"},
				"iwarp_rdma.atomic.original_request_identifier": {"1", "2"},
				"iwarp_rdma.atomic.original_remote_data_value":  {"41", "41"},
			}
			for f, w := range want {
				if got := collect(rows, f); strings.Join(got, ",") != strings.Join(w, ",") {
					t.Errorf("%s = %v, want %v", f, got, w)
				}
			}
			var ops, qns []string
			for _, r := range rows {
				ops = append(ops, r["iwarp_rdma.opcode"]...)
				qns = append(qns, r["iwarp_ddp.qn"]...)
			}
			for _, op := range []string{"0x0a", "0x0b", "0x08", "0x09"} {
				if !containsFold(ops, op) {
					t.Errorf("no frame with RDMAP opcode %s (opcodes %v)", op, ops)
				}
			}
			if !containsFold(qns, "3") {
				t.Errorf("no frame on QN 3 (QNs %v)", qns)
			}
			checkCRCStatus(t, ctx, tshark, path, c)
			checkExpertSummary(t, ctx, tshark, path, cfg)
		})
	}
}

func containsFold(vals []string, want string) bool {
	for _, v := range vals {
		if strings.EqualFold(v, want) || strings.EqualFold(v, strings.TrimPrefix(want, "0x0")) {
			return true
		}
	}
	return false
}

// TestIwarpdumpStrictRFC7306: iwarpdump -strict decodes the conversation
// with no violation (atomics single-segment, responses matching requests,
// Immediate Data of 8 octets).
func TestIwarpdumpStrictRFC7306(t *testing.T) {
	bin := iwarpdumpBinary(t)
	for _, cfg := range configs[:3] {
		t.Run(cfg.name, func(t *testing.T) {
			path, _ := writeRFC7306Capture(t, cfg)
			out, errOut, status, err := RunIwarpdump(context.Background(), bin, "-strict", path)
			if err != nil {
				t.Fatal(err)
			}
			if status != 0 || strings.Contains(out, "VIOLATION") {
				t.Fatalf("iwarpdump -strict exited %d\nstdout:\n%s\nstderr:\n%s", status, out, errOut)
			}
			for _, s := range []string{"FetchAdd req=1", "CmpSwap req=2", "req=2 original=0x29", "imm=0xdeadbeef", "imm=0x00000007"} {
				if !strings.Contains(out, s) {
					t.Errorf("iwarpdump output lacks %q:\n%s", s, out)
				}
			}
		})
	}
}
