package dissect

import (
	"encoding/hex"
	"strings"
	"testing"
	"time"

	"github.com/google/gopacket"
	"github.com/google/gopacket/layers"

	"github.com/iwarpd/iwarpd/llp/dgram"
	"github.com/iwarpd/iwarpd/rdmap"
)

// FuzzDecodePacket drives arbitrary bytes through every entry point: as a
// link-layer frame, as UD and RD datagram payloads, as MPA frames at the
// start of a TCP stream and as FPDU bytes after a negotiation, split and
// reordered through the reassembler. It must never panic.
func FuzzDecodePacket(f *testing.F) {
	hello, _ := hex.DecodeString(strings.ReplaceAll(helloFPDU, " ", ""))
	f.Add(hello)
	f.Add(udDatagram(untagged(rdmap.OpSend, 1, 0, true, []byte("x"))))
	h := dgram.RDHeader{Version: dgram.RDVersion, Type: dgram.RDData, Seq: 1}
	f.Add(dgram.AppendRD(nil, testKeys, &h, true, tagged(rdmap.OpWriteRecord, 1, 0, true, make([]byte, 12))))
	req := rev2(false, true, enh)
	f.Add(req.Append(nil))
	tm := rdmap.TerminateFor(rdmap.Terminate{}.Err, untagged(rdmap.OpSend, 1, 0, true, nil), nil)
	f.Add(untagged(rdmap.OpTerminate, 1, 0, true, tm.Append(nil)))
	// RFC 7306: Atomic Request (QN 1), Atomic Response (QN 3), Immediate
	// Data (QN 0), and the datagram Send with Immediate.
	ar := rdmap.AtomicRequest{Op: rdmap.AtomicCmpSwap, ReqID: 9, Stag: 0x100, TO: 0x1000, AddSwap: 2, AddSwapMask: ^uint64(0), CompareMask: ^uint64(0)}
	f.Add(untagged(rdmap.OpAtomicRequest, 1, 0, true, ar.Append(nil)))
	resp := rdmap.AtomicResponse{ReqID: 9, Original: 1}
	f.Add(untagged(rdmap.OpAtomicResponse, 1, 0, true, resp.Append(nil)))
	imm := rdmap.MakeImmediateData(0xfeedface)
	f.Add(untagged(rdmap.OpImmediateData, 1, 0, true, imm.Append(nil)))
	f.Add(udDatagram(untagged(rdmap.OpImmediateDataSE, 2, 0, true, append(imm.Append(nil), "payload"...))))
	f.Add(dgram.AppendRD(nil, testKeys, &h, true, untagged(rdmap.OpAtomicRequest, 1, 0, true, ar.Append(nil))))
	// The datagram profile's Write-Record with Immediate (opcode 0xD).
	f.Add(udDatagram(wrecImmSeg(3, 10, 5, imm, "world")))
	f.Add(dgram.AppendRD(nil, testKeys, &h, true, wrecImmSeg(4, 2, 0, imm, "rd")))
	f.Fuzz(func(t *testing.T, data []byte) {
		d := NewDecoder(DefaultConfig(), func(*Event) {})
		ci := gopacket.CaptureInfo{Timestamp: time.Unix(1, 0), CaptureLength: len(data), Length: len(data)}
		d.Packet(1, ci, data, layers.LinkTypeEthernet)
		d.Packet(2, ci, data, layers.LinkTypeRaw)
		d.Close()

		s := newSynth(t)
		s.udp(17000, 17001, data)
		s.udp(17500, 17501, data)
		c := s.conn(1460)
		c.bytes(1, data) // the reverse direction starts with arbitrary bytes
		c.negotiate(req, rev2(true, false, enh))
		split := uint32(len(data) / 2)
		c.raw(0, c.seq[0]+split, data[split:], nil)
		c.raw(0, c.seq[0], data[:split], nil)
		c.seq[0] += uint32(len(data))
		if len(data) <= 0xffff {
			c.bytes(0, c.fpdu(0, data)) // arbitrary bytes as a well-framed ULPDU
		}
		s.d.Close()
		for _, e := range s.events {
			_ = FormatText(e, false)
		}
	})
}
