package main

import (
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync"
	"syscall"
	"time"
)

// Profiles (-profile DIR; docs/benchmarks.md, "Where the time goes"): each
// daemon of a scenario runs with iwarpd -cpuprofile DIR/<scenario>-iwarpd-
// <node>.pprof (Go's sampling profiler, user space only), and, when perf
// works here, under perf record -g -e cpu-clock into DIR/<scenario>-
// iwarpd-<node>.perf.data (kernel and user stacks: syscalls, scheduler).
// After the scenario's rounds the daemons are stopped in order — perf
// first (SIGINT: it writes its file), then the daemon (SIGTERM: it writes
// its profile) — so that both files are complete. Meant for -only runs: a
// profile covers the daemon's whole life, every run of the scenario.

// profileFile is the path of node n's profile of kind ext in scenario.
func profileFile(cfg *benchConfig, scenario string, n *node, ext string) string {
	return filepath.Join(cfg.Profile, fmt.Sprintf("%s-iwarpd-%s.%s", scenario, n.name, ext))
}

// scenarioOf names the scenario node n belongs to.
func scenarioOf(n *node) string {
	if n.scenario != "" {
		return n.scenario
	}
	if n.netns != "" {
		return "veth"
	}
	return "loopback"
}

// profileArgs are the iwarpd flags of node n's daemon under -profile.
func profileArgs(cfg *benchConfig, n *node) []string {
	if cfg.Profile == "" {
		return nil
	}
	return []string{"-cpuprofile", profileFile(cfg, scenarioOf(n), n, "pprof")}
}

var (
	perfOnce sync.Once
	perfErr  error
)

// perfWorks says whether perf record can sample here (the software
// cpu-clock event: virtual machines often have no hardware counters).
func perfWorks() error {
	perfOnce.Do(func() {
		out, err := exec.Command("perf", "stat", "-e", "cpu-clock", "true").CombinedOutput()
		if err != nil {
			perfErr = fmt.Errorf("perf stat -e cpu-clock true: %w: %s", err, tail(string(out), 2))
		}
	})
	return perfErr
}

// profiler is a perf record attached to a daemon.
type profiler struct {
	cmd  *exec.Cmd
	out  *lockedBuffer
	done chan error
}

// startProfiling attaches perf record -g to node n's daemon (when
// -profile is set and perf works; otherwise it says why on progress).
func (s *session) startProfiling(cfg *benchConfig, n *node, progress io.Writer) error {
	if cfg.Profile == "" {
		return nil
	}
	if err := perfWorks(); err != nil {
		fmt.Fprintf(progress, "[profile] node %s: no perf record (%v); the pprof profile only\n", n.name, err)
		return nil
	}
	file := profileFile(cfg, scenarioOf(n), n, "perf.data")
	p := &profiler{out: &lockedBuffer{}, done: make(chan error, 1)}
	p.cmd = exec.Command("perf", "record", "-g", "-e", "cpu-clock", "-F", "999", "-o", file,
		"-p", strconv.Itoa(n.daemon.cmd.Process.Pid))
	p.cmd.Stdout, p.cmd.Stderr = p.out, p.out
	if err := s.start(p.cmd, -1); err != nil {
		return fmt.Errorf("node %s: starting perf record: %w", n.name, err)
	}
	go func() { p.done <- p.cmd.Wait(); s.forget(p.cmd) }()
	n.perf = p
	return nil
}

// startProfilers attaches perf record to the daemons of nodes.
func startProfilers(s *session, cfg *benchConfig, progress io.Writer, nodes ...*node) error {
	for _, n := range nodes {
		if err := s.startProfiling(cfg, n, progress); err != nil {
			return err
		}
	}
	return nil
}

// stopProfiling ends perf record (SIGINT), then the daemon (SIGTERM), of
// every node, so that both write their files, and says where they are.
func stopProfiling(cfg *benchConfig, progress io.Writer, nodes ...*node) {
	if cfg.Profile == "" {
		return
	}
	for _, n := range nodes {
		if p := n.perf; p != nil {
			p.cmd.Process.Signal(syscall.SIGINT)
			select {
			case <-p.done:
			case <-time.After(30 * time.Second):
				p.cmd.Process.Kill()
				<-p.done
				fmt.Fprintf(progress, "[profile] node %s: perf record did not stop: %s\n", n.name, tail(p.out.String(), 3))
			}
			n.perf = nil
		}
		if n.daemon != nil {
			n.daemon.stop()
		}
		for _, ext := range []string{"pprof", "perf.data"} {
			f := profileFile(cfg, scenarioOf(n), n, ext)
			if st, err := os.Stat(f); err == nil {
				fmt.Fprintf(progress, "[profile] node %s: %s (%d octets)\n", n.name, f, st.Size())
			}
		}
	}
}
