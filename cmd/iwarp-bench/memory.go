package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"os/exec"
	"strconv"
	"time"

	"github.com/iwarpd/iwarpd/internal/benchreport"
)

// Memory scaling (docs/benchmarks.md, docs/memory.md): bin/iwarp-mem, when
// built, measures the memory per peer of one UD QP with N address handles,
// one RD QP with N peers and N RC connections, for each N of -mem-peers,
// once each (it starts its own two daemons on 127.0.0.1, after the
// scenarios). The figure is the total per peer (daemon + client + kernel
// socket memory), as a ratio to RC's.

// memResult is the part of iwarp-mem -json the benchmark reads.
type memResult struct {
	Type  string `json:"type"`
	Peers int    `json:"peers"`
	Total int64  `json:"total_per_peer"`
}

func parseMemReport(out []byte, n int) (map[string]float64, error) {
	var rs []memResult
	if err := json.Unmarshal(out, &rs); err != nil {
		return nil, fmt.Errorf("reading iwarp-mem's JSON: %w (output %q)", err, tail(string(out), 3))
	}
	m := map[string]float64{}
	for _, r := range rs {
		if r.Peers != n {
			return nil, fmt.Errorf("iwarp-mem reported %d peers for %s, want %d", r.Peers, r.Type, n)
		}
		m[r.Type] = float64(r.Total)
	}
	for _, t := range []string{"ud", "rd", "rc"} {
		if _, ok := m[t]; !ok {
			return nil, fmt.Errorf("iwarp-mem reported no %s result", t)
		}
	}
	return m, nil
}

// runMemory runs iwarp-mem for each N and returns the experiment; a failed
// run is an error (the benchmark fails), the others still count.
func runMemory(cfg *benchConfig, progress io.Writer) (benchreport.Experiment, []string) {
	e := benchreport.Experiment{
		Name: "memory-peers", Title: "Memory per peer vs number of peers (loopback)",
		XLabel: "peers N", YLabel: "memory per peer (octets)", LogX: true, LogY: true, Baseline: "RC (N connections)",
		Note: "iwarp-mem: growth of daemon + client (Pss) + kernel socket memory over the exchange with N peers, divided by N; " +
			"UD: one QP with N address handles; RD: one QP, N peers; RC: N connections. One run per N.",
	}
	names := map[string]string{"ud": "UD (N AHs)", "rd": "RD (one QP)", "rc": "RC (N connections)"}
	series := map[string]*benchreport.Series{}
	for _, t := range []string{"rc", "ud", "rd"} {
		e.Series = append(e.Series, benchreport.Series{Name: names[t]})
	}
	for i := range e.Series {
		for t, n := range names {
			if n == e.Series[i].Name {
				series[t] = &e.Series[i]
			}
		}
	}
	var failures []string
	for _, n := range cfg.MemPeers {
		fmt.Fprintf(progress, "[memory] iwarp-mem -n %d (ud, rd, rc) ...\n", n)
		start := time.Now()
		cmd := exec.Command(cfg.MemBin, "-n", strconv.Itoa(n), "-json", "-port-base", strconv.Itoa(cfg.Ports.MemBase),
			"-iwarpd", cfg.daemonBin(), "-settle", "300ms")
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		out, err := cmd.Output()
		if err != nil {
			msg := fmt.Sprintf("iwarp-mem -n %d: %v: %s", n, err, tail(stderr.String(), 3))
			failures = append(failures, msg)
			fmt.Fprintf(progress, "[memory] FAILED: %s\n", msg)
			continue
		}
		m, err := parseMemReport(out, n)
		if err != nil {
			failures = append(failures, fmt.Sprintf("iwarp-mem -n %d: %v", n, err))
			continue
		}
		for t, v := range m {
			if s := series[t]; s != nil {
				s.Points = append(s.Points, benchreport.NewPoint(float64(n), []float64{v}))
			}
		}
		fmt.Fprintf(progress, "[memory] N=%d: per peer UD %.0f B, RD %.0f B, RC %.0f B (%v)\n", n, m["ud"], m["rd"], m["rc"],
			time.Since(start).Round(time.Millisecond))
	}
	return e, failures
}
