package main

import (
	"strings"
	"testing"
)

// TestLossLabels: the loss runs' metrics and plot name the size -loss-size
// asks for (they said "64 KiB" whatever it was).
func TestLossLabels(t *testing.T) {
	for _, c := range []struct {
		size int // -loss-size (0: not positive, the default 64 KiB)
		want string
	}{{4096, "4 KiB"}, {1000, "1000 B"}, {0, "64 KiB"}, {bwSize, "64 KiB"}} {
		cfg := benchConfig{Loss: []int{0, 1}, LossSize: c.size}
		sc := newScenario("veth", "", 1)
		lossMetrics(sc, &cfg)
		if len(sc.Metrics) != 4 {
			t.Fatalf("%v: %d loss metrics, want 4", c.size, len(sc.Metrics))
		}
		for i, m := range sc.Metrics {
			if !strings.Contains(m.Name, " bw "+c.want+", loss ") {
				t.Errorf("%v: metric %q does not name the size %s", c.size, m.Name, c.want)
			}
			sc.record(m.Key, 0, float64(i+1))
		}
		e, ok := lossExperiment(sc, &cfg)
		if !ok || !strings.Contains(e.Title, ", "+c.want+" messages") {
			t.Errorf("%v: loss plot %q (made: %v) does not name the size %s", c.size, e.Title, ok, c.want)
		}
	}
}

// TestSizeLabel: sizes are named exactly (raw UDP's 65507 octets are not
// "63 KiB").
func TestSizeLabel(t *testing.T) {
	for size, want := range map[int]string{1: "1 B", 64: "64 B", 1000: "1000 B", 1024: "1 KiB", 4096: "4 KiB",
		65507: "65507 B", 65536: "64 KiB", 1 << 20: "1 MiB", 3 << 19: "1536 KiB", 4 << 20: "4 MiB"} {
		if got := sizeLabel(size); got != want {
			t.Errorf("sizeLabel(%d) = %q, want %q", size, got, want)
		}
	}
}
