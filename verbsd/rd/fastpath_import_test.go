package rd

import (
	"encoding/binary"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/iwarpd/iwarpd/llp/dgram"
	"github.com/iwarpd/iwarpd/llp/rd"
	"github.com/iwarpd/iwarpd/proto"
)

var (
	fpT0   = time.Unix(1000, 0)
	fpPeer = netip.MustParseAddrPort("10.0.0.2:4791")
)

// fpEndpoint is an llp/rd endpoint with fpPeer proven both ways (our
// DATA 1 acknowledged, its DATA 1 taken), as the engine has it before a
// hand-back.
func fpEndpoint(t testing.TB) *rd.Endpoint {
	const ours, theirs = 0xAAAA, 0xBBBB
	e := rd.NewEndpoint(rd.DefaultConfig(), ours)
	if _, err := e.Send(fpT0, fpPeer, 1); err != nil {
		t.Fatal(err)
	}
	hdr := dgram.RDHeader{Version: dgram.RDVersion, Flags: dgram.FlagAck | dgram.FlagExtSACK, Window: 64, Incarnation: theirs, EchoedIncarnation: ours}
	a := hdr
	a.Type, a.CumAck = dgram.RDAck, 2
	e.Receive(fpT0, fpPeer, a, true)
	d := hdr
	d.Type, d.Seq, d.CumAck = dgram.RDData, 1, 2
	if v := e.Receive(fpT0, fpPeer, d, true); v != rd.Deliver {
		t.Fatalf("DATA 1: %v", v)
	}
	e.Poll(fpT0, nil)
	return e
}

// fpExportOne exports fpPeer into slot 0 of a fresh page.
func fpExportOne(t testing.TB, e *rd.Endpoint) ([]byte, *fpExported) {
	ps, ok := e.FastpathExport(fpT0, proto.FPRDSlots, nil)
	if !ok || len(ps) != 1 {
		t.Fatalf("export: %v %+v", ok, ps)
	}
	x := &fpExported{st: ps[0], qkey: 7, inFlight: proto.FPRDRing, maxBody: 1400, at: 1000}
	page := make([]byte, proto.FastpathRDPageLen)
	fpExportSlot(page, 0, x)
	return page, x
}

// rankSends plays a rank that sent n DATA from the exported NextSeq on,
// none acknowledged, its ring starting at head, each copy of 30 octets.
func rankSends(page []byte, x *fpExported, head, n int) {
	s := page[proto.FPRDSlotOff(0):]
	le := binary.LittleEndian
	le.PutUint32(s[proto.OffFPRDNextSeq:], x.st.NextSeq+uint32(n))
	le.PutUint32(s[proto.OffFPRDOutHead:], uint32(head))
	le.PutUint32(s[proto.OffFPRDOutN:], uint32(n))
	for k := range n {
		j := (head + k) % proto.FPRDRing
		e := s[proto.OffFPRDRing+j*proto.FPRDEntryLen:]
		le.PutUint32(e[proto.OffFPRDEntrySeq:], x.st.NextSeq+uint32(k))
		le.PutUint32(e[proto.OffFPRDEntryLen:], 30)
		le.PutUint64(e[proto.OffFPRDEntrySentAt:], uint64(1500+k))
		page[proto.FPRDCopyOff(0, j)] = byte(k + 1)
	}
}

// TestFastpathImportSlot: a slot the rank kept honestly comes back with
// its numbers and copies (the ring wrapping), and llp/rd takes it.
func TestFastpathImportSlot(t *testing.T) {
	e := fpEndpoint(t)
	page, x := fpExportOne(t, e)
	if got := binary.LittleEndian.Uint32(page[proto.FPRDSlotOff(0)+proto.OffFPRDState:]); got != proto.FPRDValid|proto.FPRDSend|proto.FPRDRecv {
		t.Fatalf("State %#x", got)
	}
	rankSends(page, x, 14, 3)
	binary.LittleEndian.PutUint32(page[proto.FPRDSlotOff(0)+proto.OffFPRDRcvNext:], x.st.RcvNext+5)
	st, outs, err := fpImportSlot(page, 0, x, 2000)
	if err != nil {
		t.Fatal(err)
	}
	if st.NextSeq != x.st.NextSeq+3 || st.SndUna != x.st.SndUna || st.RcvNext != x.st.RcvNext+5 || len(outs) != 3 {
		t.Fatalf("imported %+v, %d copies", st, len(outs))
	}
	for k, o := range outs {
		if len(o.body) != 30 || o.body[0] != byte(k+1) || o.sentAt != int64(1500+k) {
			t.Fatalf("copy %d: %d octets, first %d, sent at %d", k, len(o.body), o.body[0], o.sentAt)
		}
	}
	toks := make([]rd.FPOut, len(outs))
	for k := range outs {
		toks[k] = rd.FPOut{Tok: rd.Token(k), SentAt: fpT0}
	}
	if err := e.FastpathImport(fpT0, st, toks); err != nil {
		t.Fatal(err)
	}
}

// TestFastpathImportViolations: each field the rank can break is refused,
// naming it.
func TestFastpathImportViolations(t *testing.T) {
	le := binary.LittleEndian
	for _, c := range []struct {
		name, want string
		mess       func(s []byte, x *fpExported)
	}{
		{"SndUna behind", "SndUna", func(s []byte, x *fpExported) { le.PutUint32(s[proto.OffFPRDSndUna:], x.st.SndUna-1) }},
		{"NextSeq behind", "NextSeq", func(s []byte, x *fpExported) { le.PutUint32(s[proto.OffFPRDNextSeq:], x.st.NextSeq-1) }},
		{"AckCum beyond NextSeq", "AckCum", func(s []byte, x *fpExported) { le.PutUint32(s[proto.OffFPRDAckCum:], x.st.NextSeq+9) }},
		{"OutN too many", "OutN", func(s []byte, x *fpExported) { le.PutUint32(s[proto.OffFPRDOutN:], 4) }},
		{"OutN beyond the ring", "OutN", func(s []byte, x *fpExported) {
			le.PutUint32(s[proto.OffFPRDNextSeq:], x.st.NextSeq+40)
			le.PutUint32(s[proto.OffFPRDOutN:], 40)
		}},
		{"OutHead beyond the ring", "OutHead", func(s []byte, x *fpExported) { le.PutUint32(s[proto.OffFPRDOutHead:], proto.FPRDRing) }},
		{"Limit behind", "Limit", func(s []byte, x *fpExported) { le.PutUint32(s[proto.OffFPRDLimit:], x.st.AckCum-1) }},
		{"Limit too far", "Limit", func(s []byte, x *fpExported) { le.PutUint32(s[proto.OffFPRDLimit:], x.st.AckCum+0x10000) }},
		{"RcvNext behind", "RcvNext", func(s []byte, x *fpExported) { le.PutUint32(s[proto.OffFPRDRcvNext:], x.st.RcvNext-1) }},
		{"Unacked", "Unacked", func(s []byte, x *fpExported) { le.PutUint32(s[proto.OffFPRDUnacked:], 1<<16) }},
		{"AckDue", "AckDue", func(s []byte, x *fpExported) { le.PutUint32(s[proto.OffFPRDAckDue:], 2) }},
		{"entry sequence", "sequence number", func(s []byte, x *fpExported) {
			le.PutUint32(s[proto.OffFPRDRing+15*proto.FPRDEntryLen+proto.OffFPRDEntrySeq:], 99)
		}},
		{"entry too long", "octets", func(s []byte, x *fpExported) {
			le.PutUint32(s[proto.OffFPRDRing+0*proto.FPRDEntryLen+proto.OffFPRDEntryLen:], 1401)
		}},
		{"entry too short", "octets", func(s []byte, x *fpExported) {
			le.PutUint32(s[proto.OffFPRDRing+0*proto.FPRDEntryLen+proto.OffFPRDEntryLen:], proto.FPRDMinBody-1)
		}},
	} {
		t.Run(c.name, func(t *testing.T) {
			page, x := fpExportOne(t, fpEndpoint(t))
			rankSends(page, x, 15, 3)
			c.mess(page[proto.FPRDSlotOff(0):], x)
			if _, _, err := fpImportSlot(page, 0, x, 2000); err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("err %v, want one naming %q", err, c.want)
			}
		})
	}
	// A peer the rank could not send to must come back unchanged.
	page, x := fpExportOne(t, fpEndpoint(t))
	x.st.MaySend = false
	rankSends(page, x, 0, 1)
	if _, _, err := fpImportSlot(page, 0, x, 2000); err == nil {
		t.Fatal("a rank sent to a peer it had no right to")
	}
}

// FuzzFastpathRDImport writes arbitrary octets over an exported slot (and
// the start of its copies) and imports it: never a panic, and what is
// accepted keeps every bound — sequence numbers not behind the export,
// OutN = NextSeq − SndUna within the allowance, copies within their
// lengths, send times within the ownership — and llp/rd takes it.
func FuzzFastpathRDImport(f *testing.F) {
	e := fpEndpoint(f)
	page, x := fpExportOne(f, e)
	rankSends(page, x, 14, 3)
	f.Add(append([]byte(nil), page[proto.FPRDSlotOff(0):proto.FPRDSlotOff(1)]...))
	f.Add([]byte{})
	f.Add(make([]byte, proto.FPRDSlotLen))
	f.Fuzz(func(t *testing.T, b []byte) {
		e := fpEndpoint(t)
		page, x := fpExportOne(t, e)
		copy(page[proto.FPRDSlotOff(0):proto.FPRDSlotOff(1)], b)
		st, outs, err := fpImportSlot(page, 0, x, 2000)
		if err != nil {
			return
		}
		n := st.NextSeq - st.SndUna
		switch {
		case !dgram.SeqLessEq(x.st.SndUna, st.SndUna) || !dgram.SeqLessEq(x.st.NextSeq, st.NextSeq) || !dgram.SeqLessEq(x.st.RcvNext, st.RcvNext):
			t.Fatalf("behind the export: %+v from %+v", st, x.st)
		case n != uint32(len(outs)) || n > x.inFlight:
			t.Fatalf("%d copies for %d outstanding", len(outs), n)
		}
		toks := make([]rd.FPOut, len(outs))
		for k, o := range outs {
			if len(o.body) < proto.FPRDMinBody || len(o.body) > x.maxBody || o.sentAt < x.at || o.sentAt > 2000 {
				t.Fatalf("copy %d: %d octets sent at %d", k, len(o.body), o.sentAt)
			}
			toks[k] = rd.FPOut{Tok: rd.Token(k), SentAt: fpT0}
		}
		if err := e.FastpathImport(fpT0, st, toks); err != nil {
			t.Fatalf("llp/rd refused a checked state: %v", err)
		}
	})
}
