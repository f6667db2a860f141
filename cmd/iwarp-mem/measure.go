package main

import (
	"bufio"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"strconv"
	"strings"
)

// procMem is the memory of one process, in octets.
type procMem struct {
	RSS int64 // VmRSS of /proc/PID/status
	PSS int64 // Pss of /proc/PID/smaps_rollup (shared pages split among their users); 0 if unreadable
}

// readProcMem reads the memory of process pid ("self" for this one).
func readProcMem(pid string) (procMem, error) {
	var m procMem
	rss, err := kbField("/proc/"+pid+"/status", "VmRSS:")
	if err != nil {
		return m, err
	}
	m.RSS = rss
	if pss, err := kbField("/proc/"+pid+"/smaps_rollup", "Pss:"); err == nil {
		m.PSS = pss
	}
	return m, nil
}

// kbField returns the value of the line "name   N kB" of a /proc file, in
// octets.
func kbField(path, name string) (int64, error) {
	f, err := os.Open(path)
	if err != nil {
		return 0, err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) >= 2 && fields[0] == name {
			v, err := strconv.ParseInt(fields[1], 10, 64)
			if err != nil {
				return 0, fmt.Errorf("%s: %s: %w", path, name, err)
			}
			return v * 1024, nil
		}
	}
	if err := sc.Err(); err != nil {
		return 0, err
	}
	return 0, fmt.Errorf("%s: no %s line", path, name)
}

// kernelMem is the host's socket memory, in octets.
type kernelMem struct {
	// TCPBuf and UDPBuf: the "mem" pages of /proc/net/sockstat (socket
	// buffers charged to the protocol), times the page size.
	TCPBuf, UDPBuf int64
	// Slab: active objects × object size of the socket slab caches (TCP,
	// TCPv6, UDP, UDPv6, request_sock_TCP, sock_inode_cache) from
	// /proc/slabinfo (root only; -1 if unreadable). Host-wide: other
	// processes making sockets meanwhile add noise.
	Slab int64
	// Sockets: the "sockets: used" line of sockstat.
	Sockets int64
}

var socketSlabs = map[string]bool{"TCP": true, "TCPv6": true, "UDP": true, "UDPv6": true,
	"request_sock_TCP": true, "sock_inode_cache": true}

// readKernelMem reads sockstat (of the caller's network namespace) and
// slabinfo.
func readKernelMem() (kernelMem, error) {
	var k kernelMem
	b, err := os.ReadFile("/proc/net/sockstat")
	if err != nil {
		return k, err
	}
	page := int64(os.Getpagesize())
	for _, line := range strings.Split(string(b), "\n") {
		f := strings.Fields(line)
		if len(f) == 0 {
			continue
		}
		for i := 1; i+1 < len(f); i++ {
			v, err := strconv.ParseInt(f[i+1], 10, 64)
			if err != nil {
				continue
			}
			switch {
			case f[0] == "TCP:" && f[i] == "mem":
				k.TCPBuf = v * page
			case f[0] == "UDP:" && f[i] == "mem":
				k.UDPBuf = v * page
			case f[0] == "sockets:" && f[i] == "used":
				k.Sockets = v
			}
		}
	}
	k.Slab = -1
	if b, err := os.ReadFile("/proc/slabinfo"); err == nil {
		k.Slab = 0
		for _, line := range strings.Split(string(b), "\n") {
			f := strings.Fields(line)
			if len(f) < 4 || !socketSlabs[f[0]] {
				continue
			}
			active, err1 := strconv.ParseInt(f[1], 10, 64)
			size, err2 := strconv.ParseInt(f[3], 10, 64)
			if err1 == nil && err2 == nil {
				k.Slab += active * size
			}
		}
	}
	return k, nil
}

// hubSockets is what ss -m says about the sockets of one side.
type hubSockets struct {
	Count int   // sockets matched
	Mem   int64 // their skmem r + t + f + w + o (allocated buffers, forward allocation, options), octets
}

// readHubSockets sums ss -tuanm over the sockets match selects (by local
// and remote address). Without ss it returns an error.
func readHubSockets(match func(local, remote netip.AddrPort) bool) (hubSockets, error) {
	var h hubSockets
	out, err := exec.Command("ss", "-Htuanm").Output()
	if err != nil {
		return h, fmt.Errorf("ss -Htuanm: %w", err)
	}
	selected := false
	for _, line := range strings.Split(string(out), "\n") {
		f := strings.Fields(line)
		if len(f) == 0 {
			continue
		}
		if i := strings.Index(line, "skmem:("); i >= 0 {
			if selected {
				h.Mem += skmem(line[i+len("skmem:("):])
			}
			selected = false
			if len(f) == 1 {
				continue
			}
		}
		// "tcp ESTAB 0 0 LOCAL PEER"
		if len(f) >= 6 && (f[0] == "tcp" || f[0] == "udp") {
			local, err1 := netip.ParseAddrPort(f[4])
			remote, err2 := netip.ParseAddrPort(f[5])
			if err2 != nil {
				remote = netip.AddrPort{}
			}
			selected = err1 == nil && match(local, remote)
			if selected {
				h.Count++
			}
		}
	}
	return h, nil
}

// skmem sums the memory fields of "r0,rb131072,t0,tb16384,f0,w0,o0,bl0,d0)".
func skmem(s string) int64 {
	s, _, _ = strings.Cut(s, ")")
	var sum int64
	for _, kv := range strings.Split(s, ",") {
		for _, key := range []string{"r", "t", "f", "w", "o"} {
			if v, ok := strings.CutPrefix(kv, key); ok {
				if n, err := strconv.ParseInt(v, 10, 64); err == nil {
					sum += n
				}
			}
		}
	}
	return sum
}
