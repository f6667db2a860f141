package main

import "testing"

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
