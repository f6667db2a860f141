package dissect

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/gopacket/pcapgo"
	"github.com/iwarpd/iwarpd/internal/captures"
	"github.com/iwarpd/iwarpd/internal/testwait"
)

// capturesDir is shared/captures, or skips (internal/captures).
func capturesDir(t testing.TB) string { return captures.Dir(t) }

func decodeCapture(t testing.TB, name string) []*Event {
	t.Helper()
	var evs []*Event
	n, err := DecodeFile(filepath.Join(capturesDir(t), name), DefaultConfig(), func(e *Event) { evs = append(evs, e) })
	if err != nil {
		t.Fatal(err)
	}
	if n != 0 {
		for _, e := range evs {
			if e.Kind == KindViolation {
				t.Errorf("%s: VIOLATION frame %d: %s", name, e.Frame, e.Message)
			}
		}
		t.Fatalf("%s: %d violations", name, n)
	}
	return evs
}

func kindOf(evs []*Event, kind string) []*Event {
	var out []*Event
	for _, e := range evs {
		if e.Kind == kind {
			out = append(out, e)
		}
	}
	return out
}

func TestCapturesStrict(t *testing.T) {
	files, _ := filepath.Glob(filepath.Join(capturesDir(t), "*.pcap*"))
	if len(files) == 0 {
		t.Skip("no captures")
	}
	for _, f := range files {
		t.Run(filepath.Base(f), func(t *testing.T) {
			evs := decodeCapture(t, filepath.Base(f))
			if len(kindOf(evs, KindMPARequest)) != 1 || len(kindOf(evs, KindMPAReply)) != 1 || len(kindOf(evs, KindSegment)) < 4 {
				t.Fatalf("expected one Request, one Reply and FPDUs; got %d events", len(evs))
			}
		})
	}
}

func TestCaptureSpecifics(t *testing.T) {
	t.Run("p2p RTR", func(t *testing.T) {
		evs := decodeCapture(t, "rping-mpa2-p2p.pcap")
		req := kindOf(evs, KindMPARequest)[0].MPA
		rep := kindOf(evs, KindMPAReply)[0].MPA
		if !req.PeerToPeer || !req.WriteRTR || !req.ReadRTR || !rep.PeerToPeer || !rep.WriteRTR || rep.ReadRTR || *rep.IRD != 1 {
			t.Errorf("IRD/ORD blocks: %+v %+v", req, rep)
		}
		first := kindOf(evs, KindSegment)[0]
		if first.Frame != 8 || first.RDMAP.Name != "RDMA Write" || !first.RDMAP.RTR || *first.DDP.STag != 1 || *first.DDP.TO != 0 || first.DDP.PayloadLen != 0 {
			t.Errorf("first FPDU is not the zero-length Write RTR to STag 1: %+v %+v %+v", first, first.DDP, first.RDMAP)
		}
	})
	t.Run("crc", func(t *testing.T) {
		for _, f := range []string{"rping-mpa2-crc.pcap", "rping-mpa1-crc-q.pcap"} {
			for _, e := range kindOf(decodeCapture(t, f), KindSegment) {
				if e.CRC != "ok" {
					t.Errorf("%s frame %d: crc %s", f, e.Frame, e.CRC)
				}
			}
		}
	})
	t.Run("nocrc", func(t *testing.T) {
		evs := decodeCapture(t, "rping-mpa2-nocrc.pcap")
		for _, e := range kindOf(evs, KindSegment) {
			if e.CRC != "off" {
				t.Errorf("frame %d: crc %s, want off", e.Frame, e.CRC)
			}
		}
		if kindOf(evs, KindMPARequest)[0].MPA.CRC || kindOf(evs, KindMPAReply)[0].MPA.CRC {
			t.Error("C bit decoded in a no-CRC capture")
		}
	})
	t.Run("terminate", func(t *testing.T) {
		evs := decodeCapture(t, "host-probe-terminate-bounds.pcap")
		segs := kindOf(evs, KindSegment)
		last := segs[len(segs)-1]
		tm := last.RDMAP.Terminate
		if last.Frame != 12 || tm == nil || tm.Layer != 1 || tm.EType != 1 || tm.ECode != 1 || !tm.SiwLayout || !tm.D {
			t.Fatalf("terminate: frame %d %+v", last.Frame, tm)
		}
		if !strings.Contains(tm.Error, "base or bounds") || *last.DDP.QN != 2 || *last.DDP.MSN != 1 {
			t.Errorf("terminate: %+v %+v", tm, last.DDP)
		}
		if n := kindOf(evs, KindNote); len(n) == 0 || !strings.Contains(n[len(n)-1].Message, "siw") {
			t.Errorf("no note about the siw layout: %+v", n)
		}
	})
}

// TestCapturesMatchTshark compares the decoded sequence (frame, opcode,
// STag, MSN, ULPDU length) with tshark's iWARP dissectors.
func TestCapturesMatchTshark(t *testing.T) {
	tshark, err := exec.LookPath("tshark")
	if err != nil {
		t.Skip("tshark not installed: comparison with Wireshark's dissectors skipped")
	}
	files, _ := filepath.Glob(filepath.Join(capturesDir(t), "*.pcap*"))
	for _, f := range files {
		t.Run(filepath.Base(f), func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), testwait.Scaled(60*time.Second))
			defer cancel()
			out, err := exec.CommandContext(ctx, tshark, "-2", "-r", f, "-o", "tcp.try_heuristic_first:TRUE",
				"--disable-protocol", "rpcordma", "--disable-protocol", "smb_direct",
				"-Y", "iwarp_ddp_rdmap", "-T", "fields", "-E", "occurrence=f",
				"-e", "frame.number", "-e", "iwarp_rdma.opcode", "-e", "iwarp_ddp.stag", "-e", "iwarp_ddp.msn",
				"-e", "iwarp_mpa.ulpdulength").Output()
			if err != nil {
				t.Fatalf("tshark: %v", err)
			}
			var want []string
			for _, l := range strings.Split(strings.TrimSpace(string(out)), "\n") {
				if l == "" {
					continue
				}
				c := strings.Split(l, "\t")
				op, _ := strconv.ParseUint(strings.TrimPrefix(c[1], "0x"), 16, 8)
				stag := ""
				if c[2] != "" {
					v, _ := strconv.ParseUint(strings.TrimPrefix(c[2], "0x"), 16, 32)
					stag = fmt.Sprint(v)
				}
				want = append(want, fmt.Sprintf("%s op=%d stag=%s msn=%s len=%s", c[0], op, stag, c[3], c[4]))
			}
			var got []string
			for _, e := range kindOf(decodeCapture(t, filepath.Base(f)), KindSegment) {
				stag, msn := "", ""
				if e.DDP.STag != nil {
					stag = fmt.Sprint(*e.DDP.STag)
				}
				if e.DDP.MSN != nil {
					msn = fmt.Sprint(*e.DDP.MSN)
				}
				got = append(got, fmt.Sprintf("%d op=%d stag=%s msn=%s len=%d", e.Frame, e.RDMAP.Opcode, stag, msn, e.FPDU.ULPDULen))
			}
			if strings.Join(got, "\n") != strings.Join(want, "\n") {
				t.Fatalf("iwarpdump and tshark disagree:\n--- iwarpdump\n%s\n--- tshark\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
			}
			if len(got) == 0 {
				t.Fatal("nothing decoded")
			}
		})
	}
}

// TestPcapng rewrites a capture as pcapng and expects the same events.
func TestPcapng(t *testing.T) {
	path := filepath.Join(capturesDir(t), "rping-mpa2-crc.pcap")
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	src, err := openCapture(f)
	if err != nil {
		t.Fatal(err)
	}
	var ng bytes.Buffer
	w, err := pcapgo.NewNgWriter(&ng, src.LinkType())
	if err != nil {
		t.Fatal(err)
	}
	for {
		data, ci, err := src.ReadPacketData()
		if err != nil {
			break
		}
		ci.InterfaceIndex = 0
		if err := w.WritePacket(ci, data); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.Flush(); err != nil {
		t.Fatal(err)
	}
	text := func(r io.Reader) string {
		var b strings.Builder
		if _, err := Decode(r, DefaultConfig(), func(e *Event) { b.WriteString(FormatText(e, true) + "\n") }); err != nil {
			t.Fatal(err)
		}
		return b.String()
	}
	f2, _ := os.Open(path)
	defer f2.Close()
	want, got := text(f2), text(&ng)
	if got != want || !strings.Contains(got, "MPA-FPDU") {
		t.Fatalf("pcapng decode differs:\n%s\nwant\n%s", got, want)
	}
}
