package main

import (
	"bytes"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// fakeBin builds testdata/fake and makes a directory whose iwarpd and
// iwarp-perf are that program.
func fakeBin(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	fake := filepath.Join(dir, "fake")
	if out, err := exec.Command("go", "build", "-o", fake, "./testdata/fake").CombinedOutput(); err != nil {
		t.Fatalf("go build ./testdata/fake: %v\n%s", err, out)
	}
	for _, name := range []string{"iwarpd", "iwarp-perf"} {
		if err := os.Symlink(fake, filepath.Join(dir, name)); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

// TestPipeline runs the benchmark over the fakes: known figures must come
// out as the right medians, ratios and verdicts, in the table and in JSON.
func TestPipeline(t *testing.T) {
	bin := fakeBin(t)
	var stdout, stderr bytes.Buffer
	out := t.TempDir()
	args := []string{"-bin", bin, "-scenario", "loopback", "-rounds", "3", "-n", "10", "-bw-n", "10", "-fi=false",
		"-idle", "0", "-mem-peers", "", "-out", out}
	if code := run(args, &stdout, &stderr); code != exitOK {
		t.Fatalf("exit %d\n%s\n%s", code, stdout.String(), stderr.String())
	}
	text := stdout.String()
	for name, want := range map[string]string{
		"UD lat 64 B, median one way":    "7.50 [7.50 – 7.50] µs",
		"UD lat 64 B, mean one way":      "15.0 [15.0 – 15.0] µs",
		"raw UDP bw 65507 B (sendmmsg)":  "40.0 [40.0 – 40.0] Gb/s",
		"UD lat / raw UDP lat (medians)": "1.50× [1.50× – 1.50×] ≤ 1.5× PASS",
		"UD bw / raw UDP bw":             "0.75× [0.75× – 0.75×] ≥ 0.7× PASS",
		"UD bw / raw TCP bw":             "1.50× [1.50× – 1.50×] — n/a",
		// RC: fake figures raw TCP 6 µs / 20 Gb/s, RC Send 10 µs, Write 9 µs,
		// Write 16 Gb/s, Read 18 Gb/s.
		"RC Send lat / raw TCP lat (medians)":                 "1.67× [1.67× – 1.67×] ≤ 1.5× MISS",
		"RC Write lat / raw TCP lat (medians)":                "1.50× [1.50× – 1.50×] ≤ 1.5× PASS",
		"RC Write bw / raw TCP bw (1 MiB)":                    "0.80× [0.80× – 0.80×] ≥ 0.8× PASS",
		"RC Read bw / raw TCP bw (1 MiB)":                     "0.90× [0.90× – 0.90×] ≥ 0.8× PASS",
		"UD lat / RC Send lat (medians; about 0.75 expected)": "0.75× [0.75× – 0.75×] ≤ 0.75× PASS",
		// RD (fake: 8 µs, 25 Gb/s) against UD, RC and the raw sockets, at
		// every size of the matrix; RC Send bw 12 Gb/s.
		"RD / UD lat (medians) 64 B":        "1.07× [1.07× – 1.07×] — n/a",
		"RD / RC lat (medians) 1 MiB":       "0.80× [0.80× – 0.80×] — n/a",
		"RD / raw UDP lat (medians) 4 KiB":  "1.60× [1.60× – 1.60×] — n/a",
		"RD / raw TCP lat (medians) 64 KiB": "1.33× [1.33× – 1.33×] — n/a",
		"RD / UD bw 64 KiB":                 "0.83× [0.83× – 0.83×] — n/a",
		"RD / RC bw 1 MiB":                  "2.08× [2.08× – 2.08×] — n/a",
		"RD / raw TCP bw 1 MiB":             "1.25× [1.25× – 1.25×] — n/a",
		"RD Send lat 64 B, mean one way":    "16.0 [16.0 – 16.0] µs",
		// Sweep ends and bidirectional runs.
		"RC RDMA Write lat 1 B, median one way":              "9.00 [9.00 – 9.00] µs",
		"raw UDP lat 65507 B, median one way":                "5.00 [5.00 – 5.00] µs",
		"RC Send bw 4 MiB":                                   "12.0 [12.0 – 12.0] Gb/s",
		"UD Send bw 64 KiB bidirectional (sum of both ways)": "60.0 [60.0 – 60.0] Gb/s",
		"RD / raw TCP bidirectional bw 1 MiB":                "1.25× [1.25× – 1.25×] — n/a",
		"UD Send bw 2 KiB bidirectional (sum of both ways)":  "60.0 [60.0 – 60.0] Gb/s",
		// Multi-QP scaling: the fake's normalized latency at N QPs is
		// (0.5 + 0.5/N) of one QP's; bandwidth does not change with N.
		"UD lat 64 B, 4 QPs, normalized (round ÷ 4), median one way": "4.69 [4.69 – 4.69] µs",
		"RC lat 64 B, 1 QP, normalized (round ÷ 1), median one way":  "10.0 [10.0 – 10.0] µs",
		"UD normalized lat 64 QPs / 1 QP":                            "0.51× [0.51× – 0.51×] — n/a",
		"raw UDP bw 65507 B (scaling baseline)":                      "40.0 [40.0 – 40.0] Gb/s",
		"RC bw 4 QPs / raw TCP":                                      "0.60× [0.60× – 0.60×] — n/a",
		"RD bw 64 QPs / raw UDP":                                     "0.62× [0.62× – 0.62×] — n/a",
		// CPU per message: the fake reports 0.01 Mpps for every stream.
		"UD 64 B message rate, window 64": "10000 [10000 – 10000] msg/s",
		"RC msg rate 64 B / raw TCP":      "1.00× [1.00× – 1.00×] — n/a",
	} {
		if got := row(text, name); got != want {
			t.Errorf("row %q: %q, want %q\n%s", name, got, want, text)
		}
	}
	// Per round: 13 headline runs (RC FetchAdd and its Send/Recv emulation included), 64 latency and 37 bandwidth runs of the
	// sweep (35: UD bandwidth stops at 64 KiB), 14 bidirectional (3 sizes × 5 series, no UD at 1 MiB),
	// 44 scaling runs (7 QP counts × 3 transports × lat and bw, 2 raw baselines),
	// 15 CPU-per-message runs (3 sizes × 5 transports).
	if n := strings.Count(stderr.String(), "[loopback "); n != 3*(126+44+15) {
		t.Errorf("%d progress lines, want %d:\n%s", n, 3*(126+44+15), stderr.String())
	}
	for _, name := range []string{"UD Send 64 B stream: daemons' CPU per message", "raw UDP 65507 B stream: CPU per message (sender + receiver)",
		"RC Send 64 KiB stream: daemons' + clients' CPU per message"} {
		if row(text, name) == "" {
			t.Errorf("no row %q", name)
		}
	}
	checkResults(t, out)

	stdout.Reset()
	if code := run(append(args, "-json"), &stdout, &stderr); code != exitOK {
		t.Fatalf("-json: exit %d", code)
	}
	var doc document
	if err := json.Unmarshal(stdout.Bytes(), &doc); err != nil {
		t.Fatalf("-json: %v\n%s", err, stdout.String())
	}
	if !doc.OK || len(doc.Scenarios) != 1 || doc.Scenarios[0].Ratios[0].Summary.Median != 1.5 || doc.Scenarios[0].Ratios[0].Verdict != "PASS" {
		t.Errorf("-json document: %s", stdout.String())
	}
}

// TestPipelineDataWrong: a run whose data is wrong makes the benchmark fail
// (exit 1) and say so; the other runs still count.
func TestPipelineDataWrong(t *testing.T) {
	bin := fakeBin(t)
	if err := os.WriteFile(filepath.Join(bin, "MISMATCH"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	var stdout, stderr bytes.Buffer
	code := run([]string{"-bin", bin, "-scenario", "loopback", "-rounds", "1", "-n", "10", "-bw-n", "10", "-fi=false",
		"-quick", "-idle", "0", "-mem-peers", "", "-out", ""}, &stdout, &stderr)
	if code != exitFailed {
		t.Errorf("exit %d, want %d", code, exitFailed)
	}
	out := stdout.String()
	if !strings.Contains(out, "FAILED: round 1: UD lat 64 B") || !strings.Contains(out, "SOME RUNS FAILED") ||
		!strings.Contains(out, "byte 17 of 64") {
		t.Errorf("output:\n%s", out)
	}
}

func TestUsage(t *testing.T) {
	var stdout, stderr bytes.Buffer
	if code := run([]string{"-bin", t.TempDir()}, &stdout, &stderr); code != exitUsage ||
		!strings.Contains(stderr.String(), "run make build, or give -bin DIR") {
		t.Errorf("missing binaries: exit %d, %q", code, stderr.String())
	}
	if code := run([]string{"-h"}, &stdout, &stderr); code != exitOK {
		t.Errorf("-h: exit %d", code)
	}
}

// row returns the fields after name on the table line that starts with
// name, joined by single spaces.
func row(out, name string) string {
	for _, line := range strings.Split(out, "\n") {
		if rest, ok := strings.CutPrefix(strings.TrimSpace(line), name+" "); ok {
			return strings.Join(strings.Fields(rest), " ")
		}
	}
	return ""
}

// checkResults checks the bench-results/ directory of TestPipeline: the
// experiments' files, and ratios of the fake figures in the summary.
func checkResults(t *testing.T, dir string) {
	t.Helper()
	for _, name := range []string{"loopback-latency-datagram", "loopback-latency-rc", "loopback-bandwidth", "loopback-bandwidth-bidir",
		"loopback-scaling-latency", "loopback-scaling-bandwidth"} {
		for _, ext := range []string{".csv", ".png"} {
			if st, err := os.Stat(filepath.Join(dir, name+ext)); err != nil || st.Size() == 0 {
				t.Errorf("%s%s: %v", name, ext, err)
			}
		}
	}
	sum, err := os.ReadFile(filepath.Join(dir, "summary.md"))
	if err != nil {
		t.Fatal(err)
	}
	// UD 7.5 µs / raw UDP 5 µs; RC Write 16 / raw TCP 20 Gb/s; UD 60 / raw TCP 40 Gb/s both ways.
	for _, want := range []string{"| 64 | 1.50× [1.50× – 1.50×] | 1.60× [1.60× – 1.60×] |", "1.50× [1.50× – 1.50×]", "Ratio to **raw UDP**", "Ratio to **raw TCP**"} {
		if !strings.Contains(string(sum), want) {
			t.Errorf("summary.md lacks %q:\n%s", want, sum)
		}
	}
	csv, err := os.ReadFile(filepath.Join(dir, "loopback-bandwidth.csv"))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(csv), "loopback-bandwidth,RC RDMA Write,4194304,16,16,16,0.8,") {
		t.Errorf("loopback-bandwidth.csv lacks the 4 MiB point:\n%s", csv)
	}
	// Scaling: UD at 4 QPs 0.625 of 1 QP; RC bw 12 / raw TCP 20 Gb/s at every N.
	csv, err = os.ReadFile(filepath.Join(dir, "loopback-scaling-latency.csv"))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(csv), "loopback-scaling-latency,UD,4,0.625,0.625,0.625,,,,3") {
		t.Errorf("loopback-scaling-latency.csv lacks UD at 4 QPs:\n%s", csv)
	}
	csv, err = os.ReadFile(filepath.Join(dir, "loopback-scaling-bandwidth.csv"))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(csv), "loopback-scaling-bandwidth,RC,64,0.6,0.6,0.6,,,,3") {
		t.Errorf("loopback-scaling-bandwidth.csv lacks RC at 64 QPs:\n%s", csv)
	}
}
