package main

import (
	"reflect"
	"testing"
)

func TestParseStatTicks(t *testing.T) {
	// A real /proc/PID/stat line shape; the name holds a space and a ')'.
	line := "4242 (iw d) x) S 1 4242 4242 0 -1 4194560 1234 0 0 0 37 15 0 0 20 0 9 0 100 0 0"
	got, err := parseStatTicks(line)
	if err != nil || got != 52 {
		t.Errorf("parseStatTicks = %d, %v; want 37+15 = 52", got, err)
	}
	for _, bad := range []string{"", "4242 iwarpd S 1", "4242 (iwarpd) S 1 2 3", "1 (a) S 1 1 1 0 -1 0 0 0 0 0 x 15"} {
		if _, err := parseStatTicks(bad); err == nil {
			t.Errorf("parseStatTicks(%q): no error", bad)
		}
	}
}

func TestIntList(t *testing.T) {
	if got, err := intList("0, 1,5", 0, 50); err != nil || !reflect.DeepEqual(got, []int{0, 1, 5}) {
		t.Errorf("intList = %v, %v", got, err)
	}
	if got, err := intList("", 0, 50); err != nil || got != nil {
		t.Errorf("intList(\"\") = %v, %v", got, err)
	}
	for _, bad := range []string{"x", "51", "-1", "1,,2x"} {
		if _, err := intList(bad, 0, 50); err == nil {
			t.Errorf("intList(%q): no error", bad)
		}
	}
}

func TestParseMemReport(t *testing.T) {
	out := []byte(`[{"type":"ud","peers":16,"total_per_peer":10496},{"type":"rd","peers":16,"total_per_peer":15872},
		{"type":"rc","peers":16,"total_per_peer":60160}]`)
	m, err := parseMemReport(out, 16)
	if err != nil || m["ud"] != 10496 || m["rd"] != 15872 || m["rc"] != 60160 {
		t.Errorf("parseMemReport = %v, %v", m, err)
	}
	if _, err := parseMemReport(out, 64); err == nil {
		t.Error("wrong N accepted")
	}
	if _, err := parseMemReport([]byte(`[{"type":"ud","peers":16,"total_per_peer":1}]`), 16); err == nil {
		t.Error("missing types accepted")
	}
	if _, err := parseMemReport([]byte(`not json`), 16); err == nil {
		t.Error("bad JSON accepted")
	}
}

// TestSweepSizes checks the sweep's sizes and which transports run where.
func TestSweepSizes(t *testing.T) {
	if want := []int{1, 4, 16, 64, 256, 1024, 4096, 16384, 65536, 262144, 1048576}; !reflect.DeepEqual(fullLatSizes, want) {
		t.Errorf("latency sizes %v", fullLatSizes)
	}
	if want := []int{1024, 4096, 16384, 65536, 262144, 1048576, 4194304}; !reflect.DeepEqual(fullBWSizes, want) {
		t.Errorf("bandwidth sizes %v", fullBWSizes)
	}
	if wireSize("raw-udp", 65536) != 65507 || wireSize("ud", 65536) != 65536 || inSweep("raw-udp", "lat", 262144) ||
		inSweep("ud", "bw", 256<<10) || !inSweep("ud", "lat", 1<<20) || !inSweep("rc-write", "bw", 4<<20) || !inSweep("raw-tcp", "lat", 1) {
		t.Error("inSweep/wireSize limits")
	}
	cfg := &benchConfig{SweepIters: 2000, BWIters: 5000}
	for _, tt := range []struct {
		test       string
		size, want int
	}{{"lat", 1, 2000}, {"lat", 65536, 125}, {"lat", 1 << 20, 20}, {"bw", 1024, 5000}, {"bw", 1 << 20, 312}, {"bw", 4 << 20, 100}} {
		if got := sweepIters(cfg, tt.test, tt.size); got != tt.want {
			t.Errorf("sweepIters(%s, %d) = %d, want %d", tt.test, tt.size, got, tt.want)
		}
	}
}

// TestProfileArgs: -profile names one pprof file per scenario and node, and
// no flag at all without it.
func TestProfileArgs(t *testing.T) {
	cfg := &benchConfig{Profile: "/p"}
	if got := profileArgs(cfg, &node{name: "A"}); !reflect.DeepEqual(got, []string{"-cpuprofile", "/p/loopback-iwarpd-A.pprof"}) {
		t.Errorf("loopback A: %v", got)
	}
	if got := profileFile(cfg, scenarioOf(&node{name: "B", netns: "ns"}), &node{name: "B"}, "perf.data"); got != "/p/veth-iwarpd-B.perf.data" {
		t.Errorf("veth B perf file: %s", got)
	}
	if got := profileArgs(&benchConfig{}, &node{name: "A"}); got != nil {
		t.Errorf("no -profile: %v", got)
	}
}
