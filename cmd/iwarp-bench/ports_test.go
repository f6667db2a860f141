package main

import (
	"strings"
	"testing"
)

// TestChoosePorts: with fake ephemeral ranges, every block lies outside the
// range, above 1023 and below 65536, the blocks do not overlap, and a range
// that leaves no room is an error that names it.
func TestChoosePorts(t *testing.T) {
	tests := []struct {
		lo, hi, mem int
		want        portPlan // zero: only the invariants are checked
	}{
		{32768, 60999, 1024, portPlan{UDA: 29000, UDB: 29100, RDA: 30000, RDB: 31000, MemBase: 26100}}, // Linux's default
		{32768, 60999, 0, portPlan{UDA: 29000, UDB: 29100, RDA: 30000, RDB: 31000}},
		{1024, 60000, 16, portPlan{UDA: 61000, UDB: 61100, RDA: 62000, RDB: 63000, MemBase: 60101}}, // room only above
		{1024, 61000, 16, portPlan{}},  // above, not 1000-aligned for the last block
		{10000, 65535, 64, portPlan{}}, // room only below
		{3000, 5000, 1024, portPlan{}},
		{40000, 40000, 1024, portPlan{}},
	}
	for _, tt := range tests {
		p, err := choosePorts(tt.lo, tt.hi, tt.mem)
		if err != nil {
			t.Errorf("choosePorts(%d, %d, %d): %v", tt.lo, tt.hi, tt.mem, err)
			continue
		}
		if tt.want != (portPlan{}) && p != tt.want {
			t.Errorf("choosePorts(%d, %d, %d) = %+v, want %+v", tt.lo, tt.hi, tt.mem, p, tt.want)
		}
		blocks := []span{{lo: p.UDA, hi: p.UDA + 99}, {lo: p.UDB, hi: p.UDB + 99},
			{lo: p.RDA, hi: p.RDA + rdPortsLen - 1}, {lo: p.RDB, hi: p.RDB + rdPortsLen - 1}}
		if tt.mem > 0 {
			blocks = append(blocks, span{lo: p.MemBase - 100, hi: p.MemBase - 100 + memPorts(tt.mem) - 1})
		} else if p.MemBase != 0 {
			t.Errorf("choosePorts(%d, %d, 0): iwarp-mem base %d without memory runs", tt.lo, tt.hi, p.MemBase)
		}
		for i, b := range blocks {
			if b.lo < 1024 || b.hi > 65535 || (b.hi >= tt.lo && b.lo <= tt.hi) {
				t.Errorf("choosePorts(%d, %d, %d): block %d-%d is reserved or ephemeral (%+v)", tt.lo, tt.hi, tt.mem, b.lo, b.hi, p)
			}
			for _, c := range blocks[:i] {
				if b.lo <= c.hi && c.lo <= b.hi {
					t.Errorf("choosePorts(%d, %d, %d): blocks %d-%d and %d-%d overlap", tt.lo, tt.hi, tt.mem, c.lo, c.hi, b.lo, b.hi)
				}
			}
		}
	}
	for _, bad := range []struct{ lo, hi, mem int }{
		{1024, 65535, 0},      // everything ephemeral
		{3000, 64000, 0},      // 1976 below, 1535 above: the 3000 do not fit
		{32768, 60999, 20000}, // 40132 ports of iwarp-mem fit nowhere
	} {
		_, err := choosePorts(bad.lo, bad.hi, bad.mem)
		if err == nil || !strings.Contains(err.Error(), "ip_local_port_range") {
			t.Errorf("choosePorts(%d, %d, %d) = %v, want an error naming ip_local_port_range", bad.lo, bad.hi, bad.mem, err)
		}
	}
}

func TestParsePortRange(t *testing.T) {
	if lo, hi, err := parsePortRange("32768\t60999\n"); err != nil || lo != 32768 || hi != 60999 {
		t.Errorf("parsePortRange = %d, %d, %v", lo, hi, err)
	}
	for _, bad := range []string{"", "32768", "a b", "60999 32768", "0 100", "1 70000", "1 2 3"} {
		if lo, hi, err := parsePortRange(bad); err == nil {
			t.Errorf("parsePortRange(%q) = %d, %d, want an error", bad, lo, hi)
		}
	}
}
