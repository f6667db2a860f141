package main

import (
	"bytes"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/iwarpd/iwarpd/internal/benchreport"
	"github.com/iwarpd/iwarpd/internal/testwait"
)

func ptr(v float64) *float64 { return &v }

func TestSummarize(t *testing.T) {
	tests := []struct {
		in   []*float64
		want summary
	}{
		{nil, summary{}},
		{[]*float64{nil, nil}, summary{}},
		{[]*float64{ptr(3)}, summary{N: 1, Median: 3, Min: 3, Max: 3}},
		{[]*float64{ptr(5), nil, ptr(1), ptr(3)}, summary{N: 3, Median: 3, Min: 1, Max: 5}},
		{[]*float64{ptr(4), ptr(1), ptr(2), ptr(10)}, summary{N: 4, Median: 3, Min: 1, Max: 10}},
	}
	for _, tt := range tests {
		if got := summarize(tt.in); got != tt.want {
			t.Errorf("summarize(%v) = %+v, want %+v", tt.in, got, tt.want)
		}
	}
}

// TestRatiosPerRound checks that ratios pair values of the same round, skip
// rounds where either side is missing, and judge the median against the
// target in the right direction.
func TestRatiosPerRound(t *testing.T) {
	sc := newScenario("x", "test", 3)
	sc.addMetric("ud", "UD", "us", false)
	sc.addMetric("raw", "raw", "us", false)
	sc.addRatio("lat", "ud", "raw", "<=", 1.5)
	sc.addRatio("bw", "ud", "raw", ">=", 2.5)
	sc.addRatio("info", "ud", "raw", "", 0)
	sc.record("ud", 0, 10)
	sc.record("raw", 0, 5) // 2
	sc.record("ud", 1, 30) // raw missing: no ratio this round
	sc.record("ud", 2, 12)
	sc.record("raw", 2, 4) // 3
	sc.finish()
	if len(sc.Ratios) != 3 {
		t.Fatalf("%d ratios, want 3", len(sc.Ratios))
	}
	r := sc.Ratios[0]
	if r.Values[1] != nil || *r.Values[0] != 2 || *r.Values[2] != 3 {
		t.Errorf("per-round values %v", r.Values)
	}
	if r.Summary != (summary{N: 2, Median: 2.5, Min: 2, Max: 3}) {
		t.Errorf("summary %+v", r.Summary)
	}
	if r.Verdict != "MISS" {
		t.Errorf("2.5 <= 1.5: verdict %s, want MISS", r.Verdict)
	}
	if sc.Ratios[1].Verdict != "PASS" {
		t.Errorf("2.5 >= 2.5: verdict %s, want PASS", sc.Ratios[1].Verdict)
	}
	if sc.Ratios[2].Verdict != "n/a" {
		t.Errorf("no target: verdict %s, want n/a", sc.Ratios[2].Verdict)
	}
	if m := sc.byKey["ud"].Summary; m != (summary{N: 3, Median: 12, Min: 10, Max: 30}) {
		t.Errorf("ud summary %+v", m)
	}
}

func TestVerdictNoData(t *testing.T) {
	if v := verdict(summary{}, "<=", 1.5); v != "n/a" {
		t.Errorf("verdict without data = %s", v)
	}
}

func TestParseFIPingpong(t *testing.T) {
	// Output of fi_pingpong 1.17 (libfabric-bin), client side.
	out := "bytes   #sent   #ack     total       time     MB/sec    usec/xfer   Mxfers/sec\n" +
		"64      2k      =2k      250k        0.08s      3.38      18.93       0.05\n"
	v, err := parseFIPingpong(out, 64)
	if err != nil || v != 18.93 {
		t.Errorf("parseFIPingpong = %v, %v; want 18.93", v, err)
	}
	// An older layout, with a name column and fewer columns: found by header.
	old := "name      bytes   iters   total       time     Gb/sec    usec/xfer\n" +
		"64      10      1.2k      0.00s      0.40     1.27\n"
	if _, err := parseFIPingpong(old, 64); err == nil {
		t.Errorf("misaligned row accepted")
	}
	for _, bad := range []string{"", "garbage\n", "bytes usec/xfer\n128 3.0\n", "bytes #sent usec/xfer\n64 2k x\n", "bytes #sent usec/xfer\n64 2k 0\n"} {
		if v, err := parseFIPingpong(bad, 64); err == nil {
			t.Errorf("parseFIPingpong(%q) = %v, want an error", bad, v)
		}
	}
}

func TestDecodePerfReport(t *testing.T) {
	lat := perfTest{transport: "ud", test: "lat", size: 64, iters: 100}
	good := `{"role":"client","test":"lat","op":"send","transport":"ud","iterations":100,"ok":true,
	  "results":[{"bytes":64,"iterations":100,"verified":200,"mismatches":0,
	  "latency":{"min_us":20,"median_us":29.5,"avg_us":35,"p99_us":80,"max_us":900}}]}`
	rep, err := decodePerfReport(good, lat)
	if err != nil {
		t.Fatal(err)
	}
	if rep.Results[0].Latency.MedianUS != 29.5 || rep.Results[0].Latency.AvgUS != 35 {
		t.Errorf("latency %+v", rep.Results[0].Latency)
	}
	bw := perfTest{transport: "raw-tcp", test: "bw", size: 65536, iters: 10}
	goodBW := `{"test":"bw","transport":"raw-tcp","ok":true,"results":[{"bytes":65536,"iterations":10,"verified":10,
	  "bandwidth":{"peak_gbps":5,"avg_gbps":4.5,"msg_rate_mpps":0.008,"seconds":0.001}}]}`
	if rep, err := decodePerfReport(goodBW, bw); err != nil || rep.Results[0].Bandwidth.AvgGbps != 4.5 {
		t.Errorf("bw: %v", err)
	}
	bad := map[string]string{
		"not json":      "iwarp-perf: timed out",
		"wrong test":    strings.Replace(good, `"test":"lat"`, `"test":"bw"`, 1),
		"wrong size":    strings.Replace(good, `"bytes":64`, `"bytes":65`, 1),
		"mismatch":      strings.Replace(strings.Replace(good, `"mismatches":0`, `"mismatches":1`, 1), `"ok":true`, `"ok":false`, 1),
		"not ok":        strings.Replace(good, `"ok":true`, `"ok":false`, 1),
		"few verified":  strings.Replace(good, `"verified":200`, `"verified":199`, 1),
		"no latency":    strings.Replace(good, `"median_us":29.5`, `"median_us":0`, 1),
		"no results":    `{"test":"lat","transport":"ud","ok":true,"results":[]}`,
		"no bandwidth ": strings.Replace(goodBW, `"avg_gbps":4.5`, `"avg_gbps":0`, 1),
	}
	for name, in := range bad {
		tt := lat
		if strings.Contains(in, `"bw"`) && strings.Contains(in, "raw-tcp") {
			tt = bw
		}
		if _, err := decodePerfReport(in, tt); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
}

func TestWriteTables(t *testing.T) {
	sc := newScenario("loopback", "two daemons", 2)
	latencyMetrics(sc)
	sc.addRatio("UD lat / raw UDP lat (medians)", kUDLat, kRawUDPLat, "<=", 1.5)
	sc.record(kRawUDPLat, 0, 5)
	sc.record(kUDLat, 0, 30)
	sc.record(kRawUDPLat, 1, 6)
	sc.record(kUDLat, 1, 24)
	sc.finish()
	var progress bytes.Buffer
	sc.miss("fi_pingpong reference", "fi_pingpong not found", &progress)
	if got, want := progress.String(), "[loopback] MISS fi_pingpong reference: fi_pingpong not found\n"; got != want {
		t.Errorf("progress line %q, want %q", got, want)
	}
	skipped := newScenario("veth", "namespaces", 2)
	skipped.Skipped = "needs root and iproute2 (not root)"
	doc := &document{Machine: "2 CPUs, test", Tree: "abc", Config: benchConfig{Rounds: 2}, Scenarios: []*scenario{sc, skipped}, OK: true}
	var b bytes.Buffer
	if err := writeTables(&b, doc); err != nil {
		t.Fatal(err)
	}
	out := b.String()
	for _, want := range []string{"machine: 2 CPUs, test", "tree:    abc", "== loopback", "5.50", "[5.00 – 6.00]",
		"UD lat / raw UDP lat (medians)", "5.00×", "[4.00× – 6.00×]", "≤ 1.5×", "MISS",
		"MISS (not run): needs root", "MISS (not run) fi_pingpong reference: fi_pingpong not found"} {
		if !strings.Contains(out, want) {
			t.Errorf("table lacks %q:\n%s", want, out)
		}
	}
	b.Reset()
	if err := writeJSON(&b, doc); err != nil {
		t.Fatal(err)
	}
	var back document
	if err := json.Unmarshal(b.Bytes(), &back); err != nil {
		t.Fatal(err)
	}
	if len(back.Scenarios) != 2 || back.Scenarios[0].Ratios[0].Summary.Median != 5 || back.Scenarios[1].Skipped == "" {
		t.Errorf("JSON round trip: %s", b.String())
	}
	// summary.md gets both: the skipped scenario and the missing part.
	want := []benchreport.Miss{{Experiment: "fi_pingpong reference", Reason: "fi_pingpong not found"},
		{Experiment: "veth (every run)", Reason: "needs root and iproute2 (not root)"}}
	if got := missedOf(doc); !reflect.DeepEqual(got, want) {
		t.Errorf("missedOf = %v, want %v", got, want)
	}
}

func TestParseConfig(t *testing.T) {
	dir := t.TempDir()
	for _, name := range []string{"iwarpd", "iwarp-perf"} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte("#!/bin/sh\n"), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	var stderr bytes.Buffer
	c, err := parseConfig([]string{"-bin", dir, "-quick", "-daemon-args", "-poll-window 1ms  -x 2", "-fi=false"}, &stderr)
	if err != nil {
		t.Fatal(err)
	}
	if c.Rounds != 1 || c.LatIters != 200 || c.BWIters != 100 || strings.Join(c.DaemonArgs, ",") != "-poll-window,1ms,-x,2" || c.FIPingpong != "" {
		t.Errorf("quick config %+v", c)
	}
	c, err = parseConfig([]string{"-bin", dir, "-quick", "-n", "7", "-rounds", "3"}, &stderr)
	if err != nil || c.LatIters != 7 || c.Rounds != 3 || c.BWIters != 100 {
		t.Errorf("-quick with -n/-rounds: %+v, %v", c, err)
	}
	if !reflect.DeepEqual(c.ScalingQPs, []int{1, 4}) || c.ScalingN != 200 || c.ScalingBWN != 100 || c.ScalingRounds != 3 {
		t.Errorf("-quick scaling: %v, n %d, bw-n %d, rounds %d", c.ScalingQPs, c.ScalingN, c.ScalingBWN, c.ScalingRounds)
	}
	c, err = parseConfig([]string{"-bin", dir, "-scaling", "2,8", "-only", "ud_lat,scaling"}, &stderr)
	want := []string{"ud_lat", "scale_raw-udp_bw", "scale_raw-tcp_bw", "scale_ud_lat_2", "scale_ud_bw_2", "scale_ud_lat_8", "scale_ud_bw_8",
		"scale_rd_lat_2", "scale_rd_bw_2", "scale_rd_lat_8", "scale_rd_bw_8", "scale_rc_lat_2", "scale_rc_bw_2", "scale_rc_lat_8", "scale_rc_bw_8"}
	if err != nil || !reflect.DeepEqual(c.Only, want) {
		t.Errorf("-only ud_lat,scaling: %v, %v", c.Only, err)
	}
	if c, err := parseConfig([]string{"-bin", dir, "-scaling", ""}, &stderr); err != nil || len(c.ScalingQPs) != 0 {
		t.Errorf("-scaling \"\": %v, %v", c.ScalingQPs, err)
	}
	c, err = parseConfig([]string{"-bin", dir, "-cpu", "64,65536", "-only", "rate_rd,cpu"}, &stderr)
	want = []string{"cpu_rd_64", "cpu_raw-udp_64", "cpu_raw-tcp_64", "cpu_ud_64", "cpu_rd_64", "cpu_rc_64",
		"cpu_raw-udp_65536", "cpu_raw-tcp_65536", "cpu_ud_65536", "cpu_rd_65536", "cpu_rc_65536"}
	if err != nil || !reflect.DeepEqual(c.Only, want) || !reflect.DeepEqual(c.CPUSizes, []int{64, 65536}) || c.CPUN != 200000 {
		t.Errorf("-cpu 64,65536 -only rate_rd,cpu: %v %v %d, %v", c.Only, c.CPUSizes, c.CPUN, err)
	}
	if c, err := parseConfig([]string{"-bin", dir, "-quick"}, &stderr); err != nil || !reflect.DeepEqual(c.CPUSizes, []int{64}) || c.CPUN != 500 {
		t.Errorf("-quick cpu: %v %d, %v", c.CPUSizes, c.CPUN, err)
	}
	for _, args := range [][]string{
		{"-bin", dir, "-scenario", "moon"},
		{"-bin", dir, "-rounds", "0"},
		{"-bin", dir, "-window", "0"},
		{"-bin", dir, "-cpu-a", "999"},
		{"-bin", filepath.Join(dir, "missing")},
		{"-bin", dir, "extra"},
		{"-bin", dir, "-scaling", "65"},
		{"-bin", dir, "-scaling-rounds", "0"},
		{"-bin", dir, "-only", "scale_ud_lat_3"},
		{"-bin", dir, "-cpu", "100"},
		{"-bin", dir, "-cpu-n", "0"},
		{"-bin", dir, "-only", "rate_xx"},
	} {
		if _, err := parseConfig(args, &stderr); err == nil {
			t.Errorf("%v: accepted", args)
		}
	}
}

// TestStartPinned checks that processes started by the session run bound
// to the requested CPU from the start, and that no thread of the benchmark
// itself stays bound.
func TestStartPinned(t *testing.T) {
	s := newSession()
	defer s.close()
	cpu := runtime.NumCPU() - 1
	for range 8 {
		cmd := exec.Command("sleep", "5")
		if err := s.start(cmd, cpu); err != nil {
			t.Fatal(err)
		}
		got, err := allowedCPUs(cmd.Process.Pid)
		if err != nil {
			t.Fatal(err)
		}
		if got != strconv.Itoa(cpu) {
			t.Errorf("child runs on cpus %q, want %d", got, cpu)
		}
	}
	if runtime.NumCPU() == 1 {
		return
	}
	tasks, err := os.ReadDir("/proc/self/task")
	if err != nil {
		t.Fatal(err)
	}
	for _, task := range tasks {
		b, err := os.ReadFile(filepath.Join("/proc/self/task", task.Name(), "status"))
		if err != nil {
			continue // exited meanwhile
		}
		if strings.Contains(string(b), "Cpus_allowed_list:\t"+strconv.Itoa(cpu)+"\n") {
			t.Errorf("thread %s of the benchmark stayed bound to cpu %d", task.Name(), cpu)
		}
	}
}

// TestSmokeLoopback builds the binaries and runs the benchmark in its CI
// smoke mode on the loopback scenario: it must exit 0 and print every ratio.
// No timing is asserted.
func TestSmokeLoopback(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the binaries")
	}
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	bin := t.TempDir()
	build := exec.Command("go", "build", "-o", bin+"/", "./cmd/iwarpd", "./cmd/iwarp-perf", "./cmd/iwarpctl", "./cmd/iwarp-bench")
	build.Dir = root
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	results := t.TempDir()
	var stdout, stderr bytes.Buffer
	// The limits below only bound waits (a hung run is killed, a hung suite
	// fails the test); none is a measurement. The quick suite took 35 s on a
	// moderately loaded 2-core machine, so the suite gets about 8× that and
	// each run (server + client, 100 messages) or message wait far more than
	// it needs, all stretched by IWARPD_TEST_TIMEOUT_SCALE.
	suiteLimit := testwait.Scaled(5 * time.Minute)
	cmd := exec.Command(filepath.Join(bin, "iwarp-bench"), "-bin", bin, "-quick", "-scenario", "loopback",
		"-n", "100", "-bw-n", "50", "-fi=false", "-idle", "200ms", "-out", results,
		"-run-timeout", testwait.Scaled(2*time.Minute).String(), "-perf-timeout", testwait.Scaled(30*time.Second).String())
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	done := make(chan error, 1)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { done <- cmd.Wait() }()
	select {
	case err = <-done:
	case <-time.After(suiteLimit):
		cmd.Process.Kill()
		<-done
		t.Fatalf("iwarp-bench did not finish within %v; stdout:\n%s\nstderr:\n%s", suiteLimit, stdout.String(), stderr.String())
	}
	if err != nil {
		t.Fatalf("iwarp-bench: %v\nstdout:\n%s\nstderr:\n%s", err, stdout.String(), stderr.String())
	}
	out := stdout.String()
	for _, want := range []string{"machine: ", "== loopback", "UD lat / raw UDP lat (medians)", "UD bw / raw UDP bw",
		"UD bw / raw TCP bw", "every message intact"} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
	if strings.Contains(out, "(no data)") || strings.Contains(out, "FAILED") {
		t.Errorf("a metric is missing:\n%s", out)
	}
	for _, want := range []string{"RD / UD lat (medians) 64 B", "RD / RC bw 64 KiB", "RD Send lat 64 B, mean one way",
		"RC RDMA Write bw 64 KiB bidirectional", "== idle cost (loopback): iwarpd CPU", "RD lat 64 B, 4 QPs, normalized",
		"RC normalized lat 4 QPs / 1 QP", "UD bw 4 QPs / raw UDP", "UD Send 64 B stream: daemons' CPU per message",
		"RD CPU/msg 64 B / raw UDP (daemons / raw sender+receiver)", "RC msg rate 64 B / raw TCP"} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q", want)
		}
	}
	for _, ratio := range []string{"UD lat / raw UDP lat", "UD bw / raw UDP bw", "RC Send lat / raw TCP lat",
		"RC Write lat / raw TCP lat", "RC Write bw / raw TCP bw", "RC Read bw / raw TCP bw", "UD lat / RC Send lat",
		"RD / UD lat (medians) 64 B", "RD / RC lat (medians) 64 B", "RD / raw UDP lat (medians) 64 B",
		"RD / raw TCP bw 64 KiB", "RD / UD bw 64 KiB", "RD / raw TCP bidirectional bw 64 KiB",
		"RC FetchAdd lat / Send-Recv fetch-add emulation lat", "CPU/msg 64 B", "msg rate 64 B"} {
		for _, line := range strings.Split(out, "\n") {
			if strings.Contains(line, ratio) && !strings.Contains(line, "×") {
				t.Errorf("ratio line without a ratio: %q", line)
			}
		}
	}
	// 13 headline runs (RC FetchAdd and its Send/Recv emulation included), the sweeps at one size each (6 latency at 64 B, 6
	// bandwidth at 64 KiB), 5 bidirectional, 14 scaling (1 and 4 QPs × UD,
	// RD, RC × lat, bw; 2 raw baselines), 5 CPU per message at 64 B (raw
	// UDP, raw TCP, UD, RD, RC).
	if n := strings.Count(stderr.String(), "[loopback 1/1]"); n != 49 {
		t.Errorf("%d progress lines, want 49:\n%s", n, stderr.String())
	}
	for _, f := range []string{"summary.md", "loopback-latency-datagram.png", "loopback-bandwidth.csv", "loopback-bandwidth-bidir.png", "idle-cost.csv",
		"loopback-scaling-latency.png", "loopback-scaling-bandwidth.png"} {
		if _, err := os.Stat(filepath.Join(results, f)); err != nil {
			t.Errorf("bench results: %v", err)
		}
	}
}
