package mpa

import (
	"bytes"
	"encoding/binary"
	"os"
	"path/filepath"
	"testing"

	"github.com/iwarpd/iwarpd/internal/captures"
)

// The captures of real Linux siw traffic beside the design docs
// (../shared/captures, see its README) must decode: frames, negotiation,
// and every FPDU with a valid CRC when CRC was negotiated
// (TestSiwCaptures).

// tcpStreams reads a little-endian Ethernet/IPv4 pcap and returns the TCP
// payload of each direction (keyed by source port), in sequence order,
// without retransmissions, and the direction that spoke first.
func tcpStreams(t *testing.T, path string) (map[uint16][]byte, []uint16) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Skipf("capture not available: %v", err)
	}
	if len(b) < 24 || binary.LittleEndian.Uint32(b) != 0xa1b2c3d4 || binary.LittleEndian.Uint32(b[20:]) != 1 {
		t.Fatalf("%s: not a little-endian Ethernet pcap", path)
	}
	streams := map[uint16][]byte{}
	next := map[uint16]uint32{}
	var order []uint16
	for off := 24; off+16 <= len(b); {
		incl := int(binary.LittleEndian.Uint32(b[off+8:]))
		pkt := b[off+16 : off+16+incl]
		off += 16 + incl
		if len(pkt) < 14+20 || binary.BigEndian.Uint16(pkt[12:]) != 0x0800 {
			continue
		}
		ip := pkt[14:]
		ihl := int(ip[0]&0x0f) * 4
		if ip[9] != 6 {
			continue
		}
		ipLen := int(binary.BigEndian.Uint16(ip[2:]))
		tcp := ip[ihl:ipLen]
		sport := binary.BigEndian.Uint16(tcp[0:])
		seq := binary.BigEndian.Uint32(tcp[4:])
		payload := tcp[int(tcp[12]>>4)*4:]
		if len(payload) == 0 {
			continue
		}
		if n, ok := next[sport]; ok && seq != n {
			continue // retransmission or gap
		}
		if _, ok := streams[sport]; !ok {
			order = append(order, sport)
		}
		streams[sport] = append(streams[sport], payload...)
		next[sport] = seq + uint32(len(payload))
	}
	return streams, order
}

func TestSiwCaptures(t *testing.T) {
	dir := captures.Dir(t)
	files, _ := filepath.Glob(filepath.Join(dir, "*.pcap"))
	if len(files) == 0 {
		t.Skipf("no .pcap in %s: update the project's shared/ directory beside the checkout", dir)
	}
	for _, file := range files {
		t.Run(filepath.Base(file), func(t *testing.T) {
			streams, order := tcpStreams(t, file)
			if len(order) != 2 {
				t.Fatalf("%d directions", len(order))
			}
			ini, res := streams[order[0]], streams[order[1]]
			req, n, err := ParseFrame(ini)
			if err != nil || req.Reply {
				t.Fatalf("request: %v %+v", err, req)
			}
			ini = ini[n:]
			rep, n, err := ParseFrame(res)
			if err != nil || !rep.Reply || rep.Reject {
				t.Fatalf("reply: %v %+v", err, rep)
			}
			res = res[n:]
			// Our responder accepts siw's Request (CRC as siw would, Rev 0-2).
			if _, _, err := NewResponder(Policy{CRC: CRCOff, IRD: 1, ORD: 1, AcceptRev0: true}).HandleRequest(req); err != nil {
				t.Fatalf("our responder on siw's request: %v", err)
			}
			// Our initiator, given siw's settings, sends siw's Request byte
			// for byte and accepts siw's Reply.
			pol := Policy{Revision: req.Revision, CRC: CRCOff, PrivateData: req.PrivateData}
			if req.CRC {
				pol.CRC = CRCPreferred
			}
			if req.Enhanced {
				e, ulp, err := ParseEnhanced(req.PrivateData)
				if err != nil {
					t.Fatal(err)
				}
				pol.IRD, pol.ORD, pol.PeerToPeer, pol.RTRTypes, pol.PrivateData = e.IRD, e.ORD, e.PeerToPeer, e.rtrSet(), ulp
			}
			in := NewInitiator(pol)
			ours := in.Request()
			if got, want := ours.Append(nil), req.Append(nil); !bytes.Equal(got, want) {
				t.Fatalf("request\n% x\nsiw\n% x", got, want)
			}
			ip, err := in.HandleReply(rep)
			if err != nil {
				t.Fatalf("our initiator on siw's reply: %v", err)
			}
			if pol.PeerToPeer && ip.RTR != RTRWrite {
				t.Fatalf("p2p: %+v", ip)
			}
			crc := req.CRC || rep.CRC
			if ip.CRC != crc {
				t.Fatalf("CRC %t", ip.CRC)
			}
			for dir, s := range map[string][]byte{"initiator": ini, "responder": res} {
				var pos uint64
				count := 0
				for len(s) > 0 {
					f, err := ParseFPDU(s, pos, crc, req.Markers || rep.Markers)
					if err != nil {
						t.Fatalf("%s FPDU %d at %d: %v", dir, count, pos, err)
					}
					if err := f.Err(); err != nil {
						t.Fatalf("%s FPDU %d: %v", dir, count, err)
					}
					if crc && f.CRC == 0 {
						t.Fatalf("%s FPDU %d: zero CRC with CRC negotiated", dir, count)
					}
					// Our Sender reproduces siw's FPDU byte for byte.
					s2 := NewSender(crc, false)
					if got := s2.AppendFPDU(nil, f.ULPDU); !bytes.Equal(got, s[:f.WireLen]) {
						t.Fatalf("%s FPDU %d: re-encoding differs\n% x\n% x", dir, count, got, s[:f.WireLen])
					}
					s = s[f.WireLen:]
					pos += uint64(f.WireLen)
					count++
				}
				if count == 0 && dir == "initiator" {
					t.Fatalf("no FPDUs from the %s", dir)
				}
			}
		})
	}
}
