package main

import (
	"io"
	"testing"

	"github.com/iwarpd/iwarpd/test/daemontest"
)

// TestDatagramWriteImm runs -o write-imm on UD (lat and bw) and RD (lat):
// Write-Records with Immediate between two daemons, every message's data
// and immediate value checked by the receiving side (a wrong value fails
// the run). Daemon ports: 24300-24379, a block no other package uses; the
// RD run has daemons of its own (docs/rd.md's peer-restart note, as TestRD).
func TestDatagramWriteImm(t *testing.T) {
	bin := daemontest.Bins["iwarp-perf"]
	run := func(t *testing.T, sockA, sockB string, args ...string) (srv, cli outcome) {
		t.Helper()
		args = append(append([]string{"-o", "write-imm", "-json"}, args...), "-timeout", perfTimeout())
		srv, cli = pair(t, bin, append([]string{"-socket", sockA}, args...), append([]string{"-socket", sockB}, args...))
		mustSucceed(t, "server", srv)
		mustSucceed(t, "client", cli)
		return srv, cli
	}
	t.Run("ud", func(t *testing.T) {
		sockA := startDaemon(t, "24300-24319")
		sockB := startDaemon(t, "24320-24339")
		srv, cli := run(t, sockA, sockB, "-t", "ud", "-m", "lat", "-s", "5000", "-n", "200")
		for who, out := range map[string]string{"client": cli.stdout, "server": srv.stdout} {
			checkOpLatReport(t, decodeReport(t, who, out), who, "ud", "write-imm", 5000, 200, 400)
		}
		srv, cli = run(t, sockA, sockB, "-t", "ud", "-m", "bw", "-s", "4096", "-n", "1000")
		for who, out := range map[string]string{"client": cli.stdout, "server": srv.stdout} {
			checkBWReport(t, decodeReport(t, who, out), who, "ud", 4096, 1000)
		}
	})
	t.Run("rd", func(t *testing.T) {
		sockA := startDaemon(t, "24340-24349", "-rd-ports", "24350-24359")
		sockB := startDaemon(t, "24360-24369", "-rd-ports", "24370-24379")
		srv, cli := run(t, sockA, sockB, "-t", "rd", "-m", "lat", "-s", "5000", "-n", "100")
		for who, out := range map[string]string{"client": cli.stdout, "server": srv.stdout} {
			checkOpLatReport(t, decodeReport(t, who, out), who, "rd", "write-imm", 5000, 100, 200)
		}
	})
}

// TestParseConfigWriteImm: -o write-imm takes -t rc (lat only), ud and rd
// (lat and bw).
func TestParseConfigWriteImm(t *testing.T) {
	for _, tc := range []struct {
		typ, test string
		ok        bool
	}{{"rc", "lat", true}, {"rc", "bw", false}, {"ud", "lat", true}, {"ud", "bw", true}, {"rd", "lat", true}, {"rd", "bw", true}} {
		_, err := parseConfig([]string{"-t", tc.typ, "-o", "write-imm", "-m", tc.test}, io.Discard)
		if (err == nil) != tc.ok {
			t.Errorf("-t %s -m %s: %v", tc.typ, tc.test, err)
		}
	}
	if !wrecTest("write-imm", "ud") || !wrecTest("write-imm", "rd") || wrecTest("write-imm", "rc") || !wrecTest("write-record", "rd") {
		t.Error("wrecTest")
	}
}
