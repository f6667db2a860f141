package dgram

import (
	"bytes"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/iwarpd/iwarpd/rdmap"
)

// TestTsharkGSOSuperPacket: the Lua dissector splits a UDP GSO
// super-packet (several datagrams sent with one sendmsg, captured on the
// sending host before the kernel segmented them; docs/iwarpdump.md "GSO
// super-packets") into its datagrams as iwarpdump does: an RD Atomic
// Response (66 octets) with the ACK after it (36), and a UD Send in three
// segments of 100, 100 and 50 octets of payload; each datagram's CRC
// checks good and the frame carries the iwarp_dgram.gso note.
func TestTsharkGSOSuperPacket(t *testing.T) {
	if _, err := exec.LookPath("tshark"); err != nil {
		t.Skip("tshark not installed (apt-get install tshark): skipping the Wireshark conformance check")
	}
	resp := rdmap.AtomicResponse{ReqID: 3, Original: 41}
	h := RDHeader{Version: RDVersion, Type: RDData, Window: 256, Incarnation: 0xb2b2b2b2, Seq: 3}
	data := AppendRD(nil, goldenKeys, &h, true, untagged(rdmap.OpAtomicResponse, true, rdmap.QNAtomicResponse, 1, 0), resp.Append(nil))
	ack := RDHeader{Version: RDVersion, Type: RDAck, Flags: FlagAck, Window: 256, Incarnation: 0xb2b2b2b2, CumAck: 4}
	rdSuper := append(bytes.Clone(data), AppendRD(nil, goldenKeys, &ack, true)...)
	msg := bytes.Repeat([]byte("0123456789"), 25)
	var udSuper []byte
	for mo := 0; mo < len(msg); mo += 100 {
		end := min(mo+100, len(msg))
		udSuper = append(udSuper, AppendUD(nil, goldenKeys, true, untagged(rdmap.OpSend, end == len(msg), 0, 6, uint32(mo)), msg[mo:end])...)
	}
	fs := []frame{{17501, 17500, rdSuper, want{}}, {17000, 17001, udSuper, want{}}}
	path := filepath.Join(t.TempDir(), "gso.pcap")
	writePcap(t, path, fs)
	rows := runTshark(t, path)
	if len(rows) != 2 {
		t.Fatalf("tshark decoded %d frames, want 2", len(rows))
	}
	checks := []map[string]string{
		{"iwarp_dgram.crc.status": "1,1", "iwarp_dgram.rd.type": "1,2", "iwarp_rdma.opcode": "0x0b", "iwarp_dgram.rd.cumack": "0,4"},
		{"iwarp_dgram.crc.status": "1,1,1", "iwarp_rdma.opcode": "0x03,0x03,0x03", "iwarp_ddp.mo": "0,100,200", "iwarp_ddp.msn": "6,6,6"},
	}
	for i, c := range checks {
		r := rows[i]
		for field, want := range c {
			if r[field] != want {
				t.Errorf("frame %d (%s): %s = %q, want %q", i+1, r["_ws.col.Info"], field, r[field], want)
			}
		}
		if !strings.Contains(r["_ws.expert.message"], "GSO super-packet") || strings.Contains(r["_ws.expert.message"], "CRC") {
			t.Errorf("frame %d: expert infos %q, want the GSO note and no CRC error", i+1, r["_ws.expert.message"])
		}
		if r["_ws.malformed"] != "" || r["_ws.lua.error"] != "" {
			t.Errorf("frame %d: malformed %q, Lua error %q", i+1, r["_ws.malformed"], r["_ws.lua.error"])
		}
		t.Logf("frame %d: %s", i+1, r["_ws.col.Info"])
	}
}
