package fastpath

import (
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/iwarpd/iwarpd/ddp"
	"github.com/iwarpd/iwarpd/llp/dgram"
	"github.com/iwarpd/iwarpd/rdmap"
)

// TestEncodeWriteRecords: the Write-Record datagram the rank sends itself
// (c/core fastpath_wrec.c, issue 22) equals, octet for octet, what the
// daemon builds for a one-segment Write-Record on RD: the tagged DDP
// header of ddp.TaggedSegments (opcode 0xC, last), the Write-Record header
// of verbsd/ud WriteRecordSegments (Record ID = the MSN, Message Length,
// Message Offset 0), framed by dgram.AppendRD — edge values of every field,
// payloads up to a datagram, CRC on and off.
func TestEncodeWriteRecords(t *testing.T) {
	p := start(t, sanitizedProgram(t))
	r := rand.New(rand.NewPCG(22, 5))
	n := 0
	for _, l := range []int{0, 1, 7, 8, 9, 17, 64, 1000, 1414, 2022} {
		for k := range 8 {
			keys := dgram.Keys{QKey: edge(r), SrcQKey: edge(r)}
			stag, rid := edge(r), edge(r)
			to := uint64(edge(r))<<32 | uint64(edge(r))
			crc := k%2 == 0
			h := randRDHeader(r)
			payload := randBytes(r, l)
			segs, err := ddp.TaggedSegments(uint8(rdmap.MakeControl(rdmap.OpWriteRecord)), stag, to, uint32(l), 4096)
			if err != nil {
				continue // TO + length wraps: the daemon refuses it (WCLocLenErr), the rank too
			}
			if segs.Count() != 1 {
				t.Fatalf("%d octets: %d segments", l, segs.Count())
			}
			dh := segs.Segment(0)
			rec := rdmap.WriteRecord{RecordID: rid, MessageLength: uint32(l)}
			seg := rec.Append(dh.Header.Append(nil))
			gh := h
			gh.Version, gh.Type = dgram.RDVersion, dgram.RDData
			want := hexOr(dgram.AppendRD(nil, keys, &gh, crc, seg, payload))
			got := strings.TrimSpace(p.ask("wrec %d %d %d %d %d %d %d %d %d %d %d %d %d %d %s", keys.QKey, keys.SrcQKey, stag,
				uint32(to>>32), uint32(to), rid, b2i(crc), h.Flags, h.Window, h.Incarnation, h.EchoedIncarnation, h.Seq,
				h.CumAck, h.SACK, hexOr(payload)))
			if got != want {
				t.Fatalf("%d octets, STag %#x, TO %#x, Record ID %d, CRC %v:\nC  %s\nGo %s", l, stag, to, rid, crc, got, want)
			}
			n++
		}
	}
	t.Logf("%d datagrams equal", n)
}
