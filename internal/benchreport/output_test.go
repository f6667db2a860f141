package benchreport

import (
	"bytes"
	"flag"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

var update = flag.Bool("update", false, "rewrite the golden files in testdata/ (check them by hand)")

var testMachine = Machine{Description: "2 vCPU PVM guest, Linux 6.8", Tree: "abc1234", Config: "5 rounds"}

// golden compares got with testdata/name. The golden files were checked
// by hand: see the figures in the comments of latency() and TestRatioOf.
func golden(t *testing.T, name string, got []byte) {
	t.Helper()
	path := filepath.Join("testdata", name)
	if *update {
		if err := os.WriteFile(path, got, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Errorf("%s differs from the golden file:\n--- got\n%s\n--- want\n%s", name, got, want)
	}
}

// TestWriteCSVGolden: ratios of the latency experiment, by hand:
// ud@64 per round 20/10, 30/12, (missing), 22/11 = 2, 2.5, 2 → 2 [2 – 2.5];
// ud@65536 against raw@65507: 2, 2.2, 3, 3 → 2.6 [2 – 3];
// fi@64 (no rounds) 33/11 = 3, 24/12 = 2, 40/10 = 4; the baseline is 1.
func TestWriteCSVGolden(t *testing.T) {
	var b bytes.Buffer
	if err := WriteCSV(&b, latency()); err != nil {
		t.Fatal(err)
	}
	golden(t, "latency.csv", b.Bytes())
	b.Reset()
	if err := WriteCSV(&b, memory()); err != nil {
		t.Fatal(err)
	}
	golden(t, "memory.csv", b.Bytes())
}

func TestWriteMarkdownGolden(t *testing.T) {
	var b bytes.Buffer
	if err := WriteMarkdown(&b, testMachine, []Experiment{latency(), memory()}); err != nil {
		t.Fatal(err)
	}
	golden(t, "summary.md", b.Bytes())
	// Absolute numbers only after the machine heading.
	md := b.String()
	head := bytes.Index([]byte(md), []byte("## Absolute numbers on 2 vCPU PVM guest, Linux 6.8"))
	if head < 0 {
		t.Fatal("no machine heading")
	}
	for _, abs := range []string{"23.5", "53.5", "410"} {
		if i := bytes.Index([]byte(md), []byte(abs)); i >= 0 && i < head {
			t.Errorf("absolute value %s printed before the machine section", abs)
		}
	}
}

// TestCSVNumbersArePlainDecimals: no exponent form, and every number parses
// back to exactly the value written.
func TestCSVNumbersArePlainDecimals(t *testing.T) {
	tests := []struct {
		v    float64
		want string
	}{
		{1e6, "1000000"},
		{2.5e9, "2500000000"},
		{1.5e-7, "0.00000015"},
		{123456.789, "123456.789"},
		{0.1, "0.1"},
		{-3, "-3"},
		{0, "0"},
		{math.NaN(), ""},
		{math.Inf(1), ""},
	}
	for _, tt := range tests {
		got := num(tt.v)
		if got != tt.want {
			t.Errorf("num(%v) = %q, want %q", tt.v, got, tt.want)
		}
		if got == "" {
			continue
		}
		if back, err := strconv.ParseFloat(got, 64); err != nil || back != tt.v {
			t.Errorf("num(%v) = %q parses back to %v, %v", tt.v, got, back, err)
		}
	}
}

// TestWriteMarkdownMiss: every experiment that did not run is a visible MISS
// line, before the results, and a report without one has no such section.
func TestWriteMarkdownMiss(t *testing.T) {
	m := testMachine
	m.Missed = []Miss{
		{Experiment: "veth", Reason: "needs root and iproute2 (not root)"},
		{Experiment: "veth-loss", Reason: "nft: not found | install nftables"},
	}
	var b bytes.Buffer
	if err := WriteMarkdown(&b, m, []Experiment{latency()}); err != nil {
		t.Fatal(err)
	}
	md := b.String()
	want := "\n## Not run on this machine\n\n" +
		"- **MISS** veth: needs root and iproute2 (not root)\n" +
		"- **MISS** veth-loss: nft: not found \\| install nftables\n"
	i := strings.Index(md, want)
	if i < 0 {
		t.Fatalf("no MISS section %q in:\n%s", want, md)
	}
	if j := strings.Index(md, "\n## "+latency().Title); j < 0 || j < i {
		t.Errorf("MISS section at %d not before the first experiment (at %d)", i, j)
	}
	if n := strings.Count(md, "**MISS**"); n != len(m.Missed) {
		t.Errorf("%d MISS lines, want %d", n, len(m.Missed))
	}
	b.Reset()
	if err := WriteMarkdown(&b, testMachine, []Experiment{latency()}); err != nil {
		t.Fatal(err)
	}
	if strings.Contains(b.String(), "MISS") {
		t.Errorf("MISS printed with nothing missed:\n%s", b.String())
	}
}
