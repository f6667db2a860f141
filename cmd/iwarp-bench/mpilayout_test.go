package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/iwarpd/iwarpd/test/mpi/mpilaunch"
)

func TestMPILayoutFlags(t *testing.T) {
	if _, err := parseLayouts("shared,bogus"); err == nil || !strings.Contains(err.Error(), "engine-cpu") {
		t.Errorf("-mpi-layouts shared,bogus: %v, want an error naming the layouts", err)
	}
	ls := mpiLayouts(&mpiConfig{Layouts: []string{"shared", "engine-cpu"}, Load: 2})
	if len(ls) != 3 || ls[1].daemonCPU != 1 || ls[1].rankCPU != 0 || ls[2].load != 2 || ls[0].suffix != "" {
		t.Fatalf("layouts %+v", ls)
	}
	p2p, a2a := mpiSpecs(mpilaunch.TCP, 0.1, &mpiConfig{}, &ls[1])
	if got := strings.Join(p2p, " "); got != "lat:8:1000 bw:1048576:2:16 rate:8:200:64 overlap:1048576:5" || a2a != nil {
		t.Errorf("engine-cpu specs %q %q", got, a2a)
	}
	p2p, _ = mpiSpecs(mpilaunch.IWARPD, 1, &mpiConfig{}, &ls[2])
	if got := strings.Join(p2p, " "); got != "lat:8:10000 rate:8:2000:64" {
		t.Errorf("loaded specs %q", got)
	}
	got := parseMPIResults("RESULT rate 8 1.250 Mmsgs\nRESULT overlap 1048576 93.500 pct\nRESULT cpulat 8 7.125 usec\nRESULT cpurate 8 2.5 usec\n")
	if got["rate_8"] != 1.25 || got["overlap_1048576"] != 93.5 || got["cpulat_8"] != 7.125 || got["cpurate_8"] != 2.5 {
		t.Errorf("parseMPIResults = %v", got)
	}
}

// TestMPIIssue20Ratios checks that the targets of issue 20 come out with
// their verdicts from recorded values, per layout.
func TestMPIIssue20Ratios(t *testing.T) {
	m := &mpiConfig{Transports: []string{mpilaunch.IWARPD, mpilaunch.TCP}, Rounds: 1, Layouts: []string{"shared", "engine-cpu"}, Load: 2,
		Tests: []string{"lat:8", "overlap:1048576"}}
	ls := mpiLayouts(m)
	sc := newScenario("mpi", "", 1)
	for i := range ls {
		declareMPIMetrics(sc, m, &ls[i])
	}
	addMPIIssue20Ratios(sc, ls)
	rec := map[string]float64{"mpi_iwarpd_lat_8": 12, "mpi_tcp_lat_8": 10, "mpi_iwarpd_lat_8_ecpu": 12, "mpi_tcp_lat_8_ecpu": 10,
		"mpi_iwarpd_overlap_1048576": 95, "mpi_tcp_overlap_1048576": 3, "mpi_overlap_ideal": 100,
		"mpi_iwarpd_cpulat_8": 30, "mpi_tcp_cpulat_8": 10}
	for k, v := range rec {
		sc.record(k, 0, v)
	}
	sc.finish()
	want := map[string]string{"issue 20, shared: MPI 8 B latency: iwarpd RDM / tcp": "PASS",
		"issue 20, engine CPU: MPI 8 B latency: iwarpd RDM / tcp":                        "MISS",
		"issue 20, shared: MPI 1 MiB overlap: iwarpd RDM / ideal (100 %)":                "PASS",
		"issue 20, shared: CPU per message, 8 B ping-pong, whole node: iwarpd RDM / tcp": "MISS",
		"issue 20, under load, 2 busy: MPI 8 B latency: iwarpd RDM / tcp":                "n/a"}
	for _, r := range sc.Ratios {
		if v, ok := want[r.Name]; ok {
			if r.Verdict != v {
				t.Errorf("%s: verdict %s, want %s", r.Name, r.Verdict, v)
			}
			delete(want, r.Name)
		}
	}
	if len(want) != 0 {
		t.Errorf("ratios missing: %v", want)
	}
}

// TestMPILayoutsReal runs the MPI section for real, short: tcp and iwarpd
// RDM, 8 B latency, rate and 1 MiB overlap, in both layouts and under load
// of one busy process: every value there, every target with a verdict.
func TestMPILayoutsReal(t *testing.T) {
	if testing.Short() {
		t.Skip("runs Open MPI jobs")
	}
	if why := mpilaunch.Available(); why != "" {
		t.Skip(why)
	}
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(root, "bin")
	for _, f := range []string{filepath.Join(root, "c", "build", "libiwarpd-fi.so"), filepath.Join(bin, "iwarpd"), filepath.Join(bin, "iwarp-perf")} {
		if _, err := os.Stat(f); err != nil {
			t.Skipf("make build first: %v", err)
		}
	}
	var stderr strings.Builder
	cfg, err := parseConfig([]string{"-bin", bin, "-scenario", "mpi", "-mpi-rounds", "1", "-mpi-scale", "0.02",
		"-mpi-transports", "iwarpd,tcp", "-mpi-tests", "lat:8,rate:8,overlap:1048576", "-mpi-mem-ranks", "",
		"-mpi-load", "1", "-mpi-src", filepath.Join(root, "bench/mpi/iwmpi_bench.c"),
		"-mpi-provider", filepath.Join(root, "c", "build"), "-run-timeout", (2 * time.Minute).String()}, &stderr)
	if err != nil {
		t.Fatalf("parseConfig: %v %s", err, stderr.String())
	}
	s := newSession()
	defer s.close()
	sc := runMPI(s, &cfg, testLog{t})
	if sc.Skipped != "" || len(sc.Failures) != 0 {
		t.Fatalf("skipped %q, failures %q", sc.Skipped, sc.Failures)
	}
	for _, suf := range []string{"", "_ecpu", "_load"} {
		for _, tr := range []string{"iwarpd", "tcp"} {
			for _, k := range []string{"lat_8", "rate_8", "cpulat_8", "cpurate_8", "overlap_1048576"} {
				if suf == "_load" && k == "overlap_1048576" {
					continue
				}
				m := sc.byKey["mpi_"+tr+"_"+k+suf]
				if m == nil || m.Values[0] == nil {
					t.Errorf("%s %s%s: no value", tr, k, suf)
					continue
				}
				v := *m.Values[0]
				if v <= 0 && !strings.HasPrefix(k, "overlap") || v < 0 || strings.HasPrefix(k, "overlap") && v > 100 {
					t.Errorf("%s %s%s = %v", tr, k, suf, v)
				}
			}
		}
	}
	verdicts := 0
	for _, r := range sc.Ratios {
		if strings.HasPrefix(r.Name, "issue 20") && r.Op != "" {
			if r.Verdict != "PASS" && r.Verdict != "MISS" {
				t.Errorf("%s: verdict %q", r.Name, r.Verdict)
			}
			verdicts++
		}
	}
	if verdicts < 10 {
		t.Errorf("only %d issue 20 targets with a verdict", verdicts)
	}
}

// testLog writes the progress lines to the test's log.
type testLog struct{ t *testing.T }

func (l testLog) Write(b []byte) (int, error) {
	l.t.Log(strings.TrimRight(string(b), "\n"))
	return len(b), nil
}
