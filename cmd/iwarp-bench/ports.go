package main

import (
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
)

// The bench's daemons bind fixed UDP ports (UD and RD QPs, iwarp-mem's
// daemons). A port inside Linux's ephemeral range (ip_local_port_range,
// ip(7) and Documentation/networking/ip-sysctl.rst; 32768–60999 by
// default) may be taken at any moment by a client socket the kernel bound
// automatically, and the run then fails to bind. choosePorts puts every
// block outside that range, read at start (portRangeFile).

// portRangeFile holds "low high", the kernel's ephemeral port range.
const portRangeFile = "/proc/sys/net/ipv4/ip_local_port_range"

// scenarioPorts is the block of the scenarios' daemons from its first
// port: UD 0–99 (node A) and 100–199 (node B), RD rdPortsLen each from
// 1000 (A) and 2000 (B).
const scenarioPorts = 1000 + 2*rdPortsLen

// portPlan is where the daemons' ports are.
type portPlan struct {
	UDA     int `json:"ud_a"`     // node A's UD ports: UDA..UDA+99
	UDB     int `json:"ud_b"`     // node B's UD ports: UDB..UDB+99
	RDA     int `json:"rd_a"`     // node A's RD ports: RDA..RDA+rdPortsLen-1
	RDB     int `json:"rd_b"`     // node B's RD ports: RDB..RDB+rdPortsLen-1
	MemBase int `json:"mem_base"` // iwarp-mem -port-base (0: no memory runs)
}

func udRange(first int) string { return fmt.Sprintf("%d-%d", first, first+99) }

// memPorts is how many ports iwarp-mem -n n takes: the hub's 100 below
// -port-base, and 2n+32 from it (cmd/iwarp-mem).
func memPorts(n int) int { return 100 + 2*n + 32 }

// span is an inclusive range of ports.
type span struct {
	lo, hi int
	above  bool // above the ephemeral range
}

// localPortRange reads the kernel's ephemeral port range.
func localPortRange() (lo, hi int, err error) {
	b, err := os.ReadFile(portRangeFile)
	if err != nil {
		return 0, 0, fmt.Errorf("reading the ephemeral port range: %w", err)
	}
	lo, hi, err = parsePortRange(string(b))
	if err != nil {
		return 0, 0, fmt.Errorf("%s: %w", portRangeFile, err)
	}
	return lo, hi, nil
}

func parsePortRange(s string) (lo, hi int, err error) {
	f := strings.Fields(s)
	if len(f) != 2 {
		return 0, 0, fmt.Errorf("%q: want two port numbers", s)
	}
	lo, err1 := strconv.Atoi(f[0])
	hi, err2 := strconv.Atoi(f[1])
	if err1 != nil || err2 != nil || lo < 1 || hi > 65535 || lo > hi {
		return 0, 0, fmt.Errorf("%q: want two port numbers low <= high", s)
	}
	return lo, hi, nil
}

// choosePorts places the scenarios' block, then (memPeers > 0, the
// largest -mem-peers) iwarp-mem's, outside the ephemeral range [lo, hi]
// and above 1023: each at the highest multiple of 1000 that fits below lo,
// else the lowest above hi, never overlapping. It fails, saying what to
// change, when a block has no room.
func choosePorts(lo, hi, memPeers int) (portPlan, error) {
	var free []span
	if lo-1 >= 1024 {
		free = append(free, span{1024, lo - 1, false})
	}
	if hi+1 <= 65535 {
		free = append(free, span{hi + 1, 65535, true})
	}
	noRoom := func(n int, what string) error {
		return fmt.Errorf("no room for %d consecutive ports (%s) outside the ephemeral range %d-%d (%s) and above 1023: narrow ip_local_port_range (sysctl net.ipv4.ip_local_port_range) or ask for less",
			n, what, lo, hi, portRangeFile)
	}
	s, ok := place(&free, scenarioPorts)
	if !ok {
		return portPlan{}, noRoom(scenarioPorts, "UD and RD ports of the two daemons")
	}
	p := portPlan{UDA: s, UDB: s + 100, RDA: s + 1000, RDB: s + 1000 + rdPortsLen}
	if memPeers > 0 {
		m, ok := place(&free, memPorts(memPeers))
		if !ok {
			return portPlan{}, noRoom(memPorts(memPeers), fmt.Sprintf("iwarp-mem -n %d; lower -mem-peers", memPeers))
		}
		p.MemBase = m + 100
	}
	return p, nil
}

// place takes size ports from free (ordered low to high), from the first
// span with room: below the ephemeral range at its highest start, above it
// at its lowest; 1000-aligned when the span allows it.
func place(free *[]span, size int) (int, bool) {
	for i, sp := range *free {
		if sp.hi-sp.lo+1 < size {
			continue
		}
		var start int
		if sp.above {
			start = (sp.lo + 999) / 1000 * 1000
			if start+size-1 > sp.hi {
				start = sp.lo
			}
		} else {
			start = (sp.hi + 1 - size) / 1000 * 1000
			if start < sp.lo {
				start = sp.hi + 1 - size
			}
		}
		var rest []span
		if start > sp.lo {
			rest = append(rest, span{sp.lo, start - 1, sp.above})
		}
		if start+size <= sp.hi {
			rest = append(rest, span{start + size, sp.hi, sp.above})
		}
		*free = append((*free)[:i:i], append(rest, (*free)[i+1:]...)...)
		return start, true
	}
	return 0, false
}

// planPorts sets cfg.Ports from the kernel's ephemeral range and says
// where they are on progress.
func planPorts(cfg *benchConfig, progress io.Writer) error {
	lo, hi, err := localPortRange()
	if err != nil {
		return err
	}
	mem := 0
	if cfg.MemBin != "" {
		for _, n := range cfg.MemPeers {
			mem = max(mem, n)
		}
	}
	if cfg.Ports, err = choosePorts(lo, hi, mem); err != nil {
		return err
	}
	p := cfg.Ports
	fmt.Fprintf(progress, "iwarp-bench: ports outside the ephemeral range %d-%d: UD %s and %s, RD %d-%d and %d-%d",
		lo, hi, udRange(p.UDA), udRange(p.UDB), p.RDA, p.RDA+rdPortsLen-1, p.RDB, p.RDB+rdPortsLen-1)
	if p.MemBase != 0 {
		fmt.Fprintf(progress, ", iwarp-mem -port-base %d", p.MemBase)
	}
	fmt.Fprintln(progress)
	return nil
}
