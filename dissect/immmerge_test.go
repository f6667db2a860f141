package dissect

import (
	"strings"
	"testing"

	"github.com/iwarpd/iwarpd/rdmap"
)

// TestMergedImmediate: on an MPA stream, the tagged Immediate Data of a
// merged Send with Immediate (docs/atomics.md) and the Send after it
// decode with no finding; the Immediate Data reads as merged (event and
// text), a plain one does not.
func TestMergedImmediate(t *testing.T) {
	s := newSynth(t)
	c := s.conn(1460)
	c.negotiate(rev2(false, true, enh), rev2(true, true, enh))
	merged, plain := rdmap.MakeMergedImmediateData(0xcafef00d), rdmap.MakeImmediateData(7)
	c.bytes(0, c.fpdu(0, untagged(rdmap.OpImmediateData, 1, 0, true, merged.Append(nil))))
	c.bytes(0, c.fpdu(0, untagged(rdmap.OpSendSE, 2, 0, true, []byte("payload"))))
	c.bytes(0, c.fpdu(0, untagged(rdmap.OpImmediateData, 3, 0, true, plain.Append(nil))))
	s.d.Close()
	s.wantNoViolations()
	segs := s.segments()
	if len(segs) != 3 {
		t.Fatalf("%d segments, want 3", len(segs))
	}
	m, p := segs[0].RDMAP.Immediate, segs[2].RDMAP.Immediate
	if m == nil || !m.Merged || m.Value != 0xcafef00d || p == nil || p.Merged || p.Value != 7 {
		t.Fatalf("immediates %+v %+v", m, p)
	}
	if txt := FormatText(segs[0], false); !strings.Contains(txt, "imm=0xcafef00d (cafef00d69774d53) merged-into-next-send") {
		t.Errorf("text %q", txt)
	}
	if txt := FormatText(segs[2], false); strings.Contains(txt, "merged") {
		t.Errorf("plain immediate reads as merged: %q", txt)
	}
}
