package main

import (
	"strings"
	"testing"

	"github.com/iwarpd/iwarpd/test/mpi/mpilaunch"
)

func TestParseMPIResults(t *testing.T) {
	out := "[1,0]<stdout>:RESULT lat 8 12.345 usec\n[1,1]<stderr>:noise\n[1,0]<stdout>:RESULT bw 1048576 3.500 Gbps\n" +
		"[1,0]<stdout>:FAIL bibw 2048: 3 data errors\n"
	got := parseMPIResults(out)
	if len(got) != 2 || got["lat_8"] != 12.345 || got["bw_1048576"] != 3.5 {
		t.Errorf("parseMPIResults = %v", got)
	}
	if g := memRE.FindStringSubmatch("[1,0]<stdout>:RESULT mem 16 123456 B 789 B"); g == nil || g[1] != "16" || g[2] != "123456" || g[3] != "789" {
		t.Errorf("memRE: %q", g)
	}
}

func TestMPISpec(t *testing.T) {
	if s := (mpiTest{"bw", 1 << 20, 10, 16}).spec(0.1); s != "bw:1048576:2:16" {
		t.Errorf("spec = %q", s)
	}
	if s := (mpiTest{"lat", 8, 10000, 0}).spec(1); s != "lat:8:10000" {
		t.Errorf("spec = %q", s)
	}
	if k := mpiKey("iwarpd;ofi_rxm", "bibw", 2048); k != "mpi_iwarpd_ofi_rxm_bibw_2048" {
		t.Errorf("key = %q", k)
	}
}

func TestMPISpecsOneSided(t *testing.T) {
	p2p, _ := mpiSpecs(mpilaunch.BTLOFI, 1, nil, nil)
	all := strings.Join(p2p, " ")
	for _, want := range []string{"put:8:2000", "get:8:2000", "fop:8:2000", "putbw:1048576:10:16", "passive:1000:3"} {
		if !strings.Contains(all, want) {
			t.Errorf("iwarpd+btl specs %q lack %s", all, want)
		}
	}
	if strings.Count(all, "passive") != 1 {
		t.Errorf("passive runs once for its three results: %q", all)
	}
	p2p, _ = mpiSpecs(mpilaunch.UDPRxD, 1, nil, nil)
	if s := strings.Join(p2p, " "); strings.Contains(s, "put") || strings.Contains(s, "passive") {
		t.Errorf("udp;ofi_rxd runs no one-sided test: %q", s)
	}
	got := parseMPIResults("RESULT passfop 1000 812.500 usec\nRESULT putbw 1048576 2.250 Gbps\n")
	if got["passfop_1000"] != 812.5 || got["putbw_1048576"] != 2.25 {
		t.Errorf("parseMPIResults = %v", got)
	}
}

func TestMPITestsFlag(t *testing.T) {
	c := &mpiConfig{Tests: []string{"lat:65536", "bw:1048576", "passive:1000"}}
	p2p, a2a := mpiSpecs(mpilaunch.TCP, 1, c, nil)
	if got := strings.Join(p2p, " "); got != "lat:65536:1000 bw:1048576:10:16 passive:1000:3" || len(a2a) != 0 {
		t.Errorf("-mpi-tests lat:65536,bw:1048576,passive:1000: p2p %q, a2a %q", got, a2a)
	}
	var b benchConfig
	if err := finishMPIFlags(&b, "tcp", "", "lat:7", "shared", map[string]bool{}); err == nil || !strings.Contains(err.Error(), "lat:65536") {
		t.Errorf("-mpi-tests lat:7: %v, want an error naming the tests", err)
	}
}
