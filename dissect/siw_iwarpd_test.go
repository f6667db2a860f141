package dissect

import (
	"path/filepath"
	"testing"
)

// TestSiwIwarpdCaptures decodes real traffic between iwarpd (host) and
// Linux siw (a qemu guest), recorded by test/siwvm's TestIwarpdSiwInterop
// inside the guest: rping in both roles, MPA rev 2 with CRC, peer-to-peer,
// and rev 1 without CRC. The guest reaches iwarpd through qemu's user
// network, which forges the host side's MSS, so the MULPDU check is off
// (docs/siw-interop.md); every other strict check applies.
func TestSiwIwarpdCaptures(t *testing.T) {
	files, err := filepath.Glob("testdata/siw-iwarpd/*.pcap")
	if err != nil || len(files) == 0 {
		t.Fatalf("no siw-iwarpd captures in testdata: %v", err)
	}
	cfg := DefaultConfig()
	cfg.SkipMULPDU = true
	for _, f := range files {
		t.Run(filepath.Base(f), func(t *testing.T) {
			var evs []*Event
			n, err := DecodeFile(f, cfg, func(e *Event) { evs = append(evs, e) })
			if err != nil {
				t.Fatal(err)
			}
			for _, e := range evs {
				if e.Kind == KindViolation {
					t.Errorf("VIOLATION frame %d: %s", e.Frame, e.Message)
				}
			}
			if n != 0 {
				t.Fatalf("%d violations", n)
			}
			segs := kindOf(evs, KindSegment)
			if len(kindOf(evs, KindMPARequest)) < 1 || len(kindOf(evs, KindMPAReply)) < 1 || len(segs) < 10 {
				t.Fatalf("want MPA Request, Reply and FPDUs: %d requests, %d replies, %d segments",
					len(kindOf(evs, KindMPARequest)), len(kindOf(evs, KindMPAReply)), len(segs))
			}
			for _, e := range segs {
				if e.CRC == "bad" {
					t.Errorf("frame %d: bad CRC", e.Frame)
				}
			}
		})
	}
}
