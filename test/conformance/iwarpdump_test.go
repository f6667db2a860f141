package conformance

import (
	"bufio"
	"context"
	"encoding/json"
	"os"
	"strings"
	"sync"
	"testing"
)

// iwarpdump is built once per test binary, into a directory removed by
// TestMain.
var (
	dumpOnce sync.Once
	dumpBin  string
	dumpErr  error
	dumpDir  string
)

func TestMain(m *testing.M) {
	code := m.Run()
	if dumpDir != "" {
		os.RemoveAll(dumpDir)
	}
	os.Exit(code)
}

func iwarpdumpBinary(t *testing.T) string {
	t.Helper()
	dumpOnce.Do(func() {
		dumpDir, dumpErr = os.MkdirTemp("", "iwarpd-conformance-")
		if dumpErr != nil {
			return
		}
		dumpBin, dumpErr = BuildIwarpdump(context.Background(), dumpDir)
	})
	if dumpErr != nil {
		t.Skipf("cmd/iwarpdump does not build yet (the lead re-runs this test): %v", dumpErr)
	}
	return dumpBin
}

// dumpEvent is the part of iwarpdump's -json output (docs/iwarpdump.md)
// this test reads.
type dumpEvent struct {
	Kind    string `json:"kind"`
	Frame   int    `json:"frame"`
	CRC     string `json:"crc"`
	Message string `json:"message"`
	DDP     *struct {
		Tagged     bool    `json:"tagged"`
		Last       bool    `json:"last"`
		STag       *uint32 `json:"stag"`
		TO         *uint64 `json:"to"`
		QN         *uint32 `json:"qn"`
		MSN        *uint32 `json:"msn"`
		MO         *uint32 `json:"mo"`
		SegmentLen int     `json:"segment_len"`
	} `json:"ddp"`
	RDMAP *struct {
		Opcode uint8 `json:"opcode"`
	} `json:"rdmap"`
}

func TestIwarpdumpStrict(t *testing.T) {
	bin := iwarpdumpBinary(t)
	ctx := context.Background()
	for _, cfg := range configs {
		t.Run(cfg.name, func(t *testing.T) {
			path, c := writeCapture(t, cfg)
			out, errOut, status, err := RunIwarpdump(ctx, bin, "-strict", path)
			if err != nil {
				t.Fatal(err)
			}
			if status != 0 {
				t.Errorf("iwarpdump -strict exited %d\nstdout:\n%s\nstderr:\n%s", status, out, errOut)
			}
			for _, line := range strings.Split(out, "\n") {
				if strings.Contains(line, "VIOLATION") {
					t.Errorf("text output: %s", line)
				}
			}

			out, errOut, status, err = RunIwarpdump(ctx, bin, "-strict", "-json", path)
			if err != nil {
				t.Fatal(err)
			}
			if status != 0 {
				t.Errorf("iwarpdump -strict -json exited %d\nstderr:\n%s", status, errOut)
			}
			var segs []dumpEvent
			sc := bufio.NewScanner(strings.NewReader(out))
			sc.Buffer(make([]byte, 0, 1<<16), 1<<22)
			for sc.Scan() {
				var e dumpEvent
				if err := json.Unmarshal(sc.Bytes(), &e); err != nil {
					t.Fatalf("-json line %q: %v", sc.Text(), err)
				}
				switch e.Kind {
				case "segment":
					segs = append(segs, e)
				case "violation":
					t.Errorf("violation at frame %d: %s", e.Frame, e.Message)
				}
			}
			if len(segs) != len(c.fpdus) {
				t.Fatalf("iwarpdump -json reported %d segments, we wrote %d FPDUs", len(segs), len(c.fpdus))
			}
			for i, e := range segs {
				checkDumpSegment(t, i, e, c.fpdus[i], cfg.crc)
			}
		})
	}
}

// checkDumpSegment compares one iwarpdump segment with what we encoded.
func checkDumpSegment(t *testing.T, i int, e dumpEvent, r *fpduRecord, crc bool) {
	t.Helper()
	wantCRC := "off"
	if crc {
		wantCRC = "ok"
	}
	if e.CRC != wantCRC {
		t.Errorf("segment %d (frame %d): crc %q, want %q", i, e.Frame, e.CRC, wantCRC)
	}
	if e.DDP == nil || e.RDMAP == nil {
		t.Errorf("segment %d (frame %d): no DDP/RDMAP part", i, e.Frame)
		return
	}
	h, d := r.hdr, e.DDP
	ok := d.Tagged == h.Tagged && d.Last == h.Last && d.SegmentLen == len(r.ulpdu) &&
		rdmapOpcode(e) == uint8(r.opcode())
	if h.Tagged {
		ok = ok && d.STag != nil && *d.STag == h.Stag && d.TO != nil && *d.TO == h.TO
	} else {
		ok = ok && d.QN != nil && *d.QN == h.QN && d.MSN != nil && *d.MSN == h.MSN && d.MO != nil && *d.MO == h.MO
	}
	if !ok {
		t.Errorf("segment %d (frame %d): iwarpdump %+v %+v, we encoded %v", i, e.Frame, *d, *e.RDMAP, r)
	}
}

func rdmapOpcode(e dumpEvent) uint8 { return e.RDMAP.Opcode }

// TestIwarpdumpStrictFailsOnBadCRC proves the iwarpdump check can fail: a
// capture with one corrupted CRC must make -strict exit 1 and name a frame.
func TestIwarpdumpStrictFailsOnBadCRC(t *testing.T) {
	bin := iwarpdumpBinary(t)
	cfg := config{name: "bad-crc", rev: 2, crc: true, mss: 1460, corrupt: 5}
	path, _ := writeCapture(t, cfg)
	out, errOut, status, err := RunIwarpdump(context.Background(), bin, "-strict", path)
	if err != nil {
		t.Fatal(err)
	}
	if status != 1 {
		t.Errorf("iwarpdump -strict on a bad CRC exited %d, want 1\nstderr:\n%s", status, errOut)
	}
	if !strings.Contains(out+errOut, "VIOLATION frame") {
		t.Errorf("no VIOLATION line for the bad CRC:\n%s\n%s", out, errOut)
	}
}
