// Command iwarp-mem measures the memory one queue pair's peers cost: one
// UD or RD QP talking to N peers against N RC connections.
//
// For each type it starts two iwarpd processes on 127.0.0.1 — a peer
// daemon hosting the N far ends (N datagram QPs, or a listener and N
// accepted RC QPs, all served by this process) and a hub daemon — and runs
// the hub client in a child process (this program with -role hub): one
// datagram QP with N address handles, or N RC QPs connected to the
// listener. The hub exchanges one 64-octet message each way with every
// peer, so every per-peer structure exists. Before and after the exchange
// it reads the hub daemon's and the hub client's VmRSS and Pss
// (/proc/PID/status, smaps_rollup) and the kernel memory of the hub
// daemon's sockets (ss -m: buffers and forward allocation of its UDP
// socket, or of its ends of the TCP connections; plus, for new sockets,
// their share of the socket slab caches' growth in /proc/slabinfo, root
// only), and prints the growth per peer. The peer daemon, the peers'
// session and the peers' sockets are not counted.
//
//	iwarp-mem [-n 1000] [-types ud,rd,rc] [-iwarpd PATH] [-port-base 30100] [-settle 1s] [-json]
//
// Both daemons are its own, sized for N: -max-qp, -user-max-qp and
// -user-max-ports N+16 (docs/memory.md), above the per-user defaults of a
// small machine (docs/iwarpd.md "Limits per user").
package main

import (
	"bufio"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/iwarpd/iwarpd/internal/pinfork"
	"github.com/iwarpd/iwarpd/ofverbs"
)

func main() {
	if err := run(os.Args[1:], os.Stdout); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			os.Exit(2)
		}
		fmt.Fprintln(os.Stderr, "iwarp-mem:", err)
		os.Exit(1)
	}
}

type options struct {
	n        int
	types    []string
	iwarpd   string
	portBase int
	settle   time.Duration
	json     bool
}

var qpTypes = map[string]ofverbs.QPType{"ud": ofverbs.QPTypeUD, "rd": ofverbs.QPTypeRD, "rc": ofverbs.QPTypeRC,
	"rc64": ofverbs.QPTypeRC}

// rcDepth is the send and receive queue depth of the hub's RC QPs per
// -types name: "rc" as small as the exchange allows (4 send, 2 receive
// WRs: the cheapest RC QP), "rc64" a realistic 64/64.
var rcDepth = map[string][2]uint32{"rc": {4, 2}, "rc64": {64, 64}}

func run(args []string, stdout io.Writer) error {
	fs := flag.NewFlagSet("iwarp-mem", flag.ContinueOnError)
	n := fs.Int("n", 1000, "peers")
	types := fs.String("types", "ud,rd,rc", "QP types measured, comma-separated: ud, rd, rc (4 send/2 receive WRs), rc64 (64/64)")
	bin := fs.String("iwarpd", "", "iwarpd `binary` (default: beside this program, else on PATH)")
	portBase := fs.Int("port-base", 30100, "first UDP port of the peer daemon (it takes 2N+32 ports from there; the hub takes the 100 below)")
	settle := fs.Duration("settle", time.Second, "wait before each reading")
	jsonOut := fs.Bool("json", false, "print the results as JSON")
	gogc := fs.String("gogc", "", "GOGC of the daemons and the hub client (default: inherited; a low value brings RSS near the live heap)")
	role := fs.String("role", "", "internal: hub (the hub client process)")
	hubType := fs.String("type", "", "internal: the hub's QP type")
	hubSock := fs.String("socket", "", "internal: the hub daemon's socket")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *role == "hub" {
		return hubMain(*hubSock, *hubType, *n)
	}
	if *n < 1 || *n > 20000 {
		return fmt.Errorf("-n %d: want 1..20000", *n)
	}
	if *portBase-100 < 1024 || *portBase+2**n+32 > 65535 {
		return fmt.Errorf("-port-base %d: the ports %d..%d do not fit", *portBase, *portBase-100, *portBase+2**n+32)
	}
	o := options{n: *n, iwarpd: *bin, portBase: *portBase, settle: *settle, json: *jsonOut}
	if *gogc != "" {
		// Inherited by the daemons and the hub client this process starts.
		if err := os.Setenv("GOGC", *gogc); err != nil {
			return err
		}
	}
	for _, t := range strings.Split(*types, ",") {
		if _, ok := qpTypes[t]; !ok {
			return fmt.Errorf("-types: unknown type %q", t)
		}
		o.types = append(o.types, t)
	}
	if o.iwarpd == "" {
		var err error
		if o.iwarpd, err = findIwarpd(); err != nil {
			return err
		}
	}
	var results []result
	for _, t := range o.types {
		r, err := measure(o, t)
		if err != nil {
			return fmt.Errorf("%s: %w", t, err)
		}
		results = append(results, r)
	}
	if o.json {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(results)
	}
	report(stdout, o.n, results)
	return nil
}

// findIwarpd looks beside this program, then on PATH.
func findIwarpd() (string, error) {
	if exe, err := os.Executable(); err == nil {
		p := filepath.Join(filepath.Dir(exe), "iwarpd")
		if st, err := os.Stat(p); err == nil && st.Mode().IsRegular() {
			return p, nil
		}
	}
	p, err := exec.LookPath("iwarpd")
	if err != nil {
		return "", errors.New("iwarpd not found beside this program nor on PATH: give -iwarpd")
	}
	return p, nil
}

// result is one type's measurement; memory in octets.
type result struct {
	Type    string `json:"type"`
	Peers   int    `json:"peers"`
	Replies int    `json:"replies"` // messages back from the peers (UD may lose some)
	// Before and after the exchange.
	DaemonBefore procMem    `json:"daemon_before"`
	DaemonAfter  procMem    `json:"daemon_after"`
	ClientBefore procMem    `json:"client_before"`
	ClientAfter  procMem    `json:"client_after"`
	KernelBefore kernelMem  `json:"kernel_before"` // host-wide
	KernelAfter  kernelMem  `json:"kernel_after"`
	HubBefore    hubSockets `json:"hub_sockets_before"` // the hub daemon's sockets (ss -m)
	HubAfter     hubSockets `json:"hub_sockets_after"`
	// Per peer.
	DaemonRSS int64 `json:"daemon_rss_per_peer"`
	DaemonPSS int64 `json:"daemon_pss_per_peer"`
	ClientRSS int64 `json:"client_rss_per_peer"`
	ClientPSS int64 `json:"client_pss_per_peer"`
	Kernel    int64 `json:"kernel_per_peer"`
	Total     int64 `json:"total_per_peer"` // daemon + client (Pss when readable, else RSS) + kernel
}

func (r *result) compute() {
	n := int64(r.Peers)
	r.DaemonRSS = (r.DaemonAfter.RSS - r.DaemonBefore.RSS) / n
	r.DaemonPSS = (r.DaemonAfter.PSS - r.DaemonBefore.PSS) / n
	r.ClientRSS = (r.ClientAfter.RSS - r.ClientBefore.RSS) / n
	r.ClientPSS = (r.ClientAfter.PSS - r.ClientBefore.PSS) / n
	// Kernel: the hub's sockets' buffers (ss -m), plus the socket slab
	// growth in proportion of the sockets that are the hub's (RC: half of
	// them, the other half are the peers'; UD, RD: none, the hub's one
	// socket existed before).
	k := r.HubAfter.Mem - r.HubBefore.Mem
	newHub := int64(r.HubAfter.Count - r.HubBefore.Count)
	newAll := r.KernelAfter.Sockets - r.KernelBefore.Sockets
	if slab := r.KernelAfter.Slab - r.KernelBefore.Slab; r.KernelAfter.Slab >= 0 && newHub > 0 && newAll > 0 {
		k += slab * min(newHub, newAll) / newAll
	}
	r.Kernel = k / n
	d, c := r.DaemonPSS, r.ClientPSS
	if r.DaemonAfter.PSS == 0 || r.ClientAfter.PSS == 0 {
		d, c = r.DaemonRSS, r.ClientRSS
	}
	r.Total = d + c + r.Kernel
}

// measure runs one type's experiment.
func measure(o options, typ string) (result, error) {
	r := result{Type: typ, Peers: o.n}
	dir, err := tempDir()
	if err != nil {
		return r, err
	}
	defer os.RemoveAll(dir)
	ports := func(a, b int) string { return fmt.Sprintf("%d-%d", a, b) }
	// The daemons are this measurement's own, sized for N: the peer
	// daemon holds N QPs (N UDP ports for UD and RD) of one user, beyond
	// the per-user defaults of a small machine (docs/iwarpd.md "Limits
	// per user": 376 ports on 23.5 GiB of RAM, sized for a node of MPI
	// ranks, one RD port each), so the per-user limits are raised with
	// the per-session one.
	qps := strconv.Itoa(o.n + 16)
	lim := []string{"-addr", "127.0.0.1", "-max-qp", qps, "-user-max-qp", qps, "-user-max-ports", qps,
		"-max-cqe", "65536", "-rd-idle-timeout", "1h"}
	pd, err := startDaemon(o.iwarpd, dir, "peers", append([]string{"-ud-ports", ports(o.portBase, o.portBase+o.n+15),
		"-rd-ports", ports(o.portBase+o.n+16, o.portBase+2*o.n+31)}, lim...)...)
	if err != nil {
		return r, err
	}
	defer pd.stop()
	hd, err := startDaemon(o.iwarpd, dir, "hub", append([]string{"-ud-ports", ports(o.portBase-100, o.portBase-51),
		"-rd-ports", ports(o.portBase-50, o.portBase-1)}, lim...)...)
	if err != nil {
		return r, err
	}
	defer hd.stop()

	p, err := newPeers(pd.sock, qpTypes[typ], o.n)
	if err != nil {
		return r, err
	}
	defer p.close()
	stop := make(chan struct{})
	served := make(chan error, 1)
	go func() { served <- p.serve(stop) }()
	defer func() {
		close(stop)
		<-served
	}()
	accepted := make(chan error, 1)
	if p.ln != nil {
		go func() { accepted <- p.acceptRC(o.n) }()
	}

	h, err := startHub(hd.sock, typ, o.n)
	if err != nil {
		return r, err
	}
	defer h.close()
	if p.ln != nil {
		fmt.Fprintln(h.stdin, p.ln.Addr())
	}
	for _, a := range p.addrs {
		fmt.Fprintln(h.stdin, a)
	}
	fmt.Fprintln(h.stdin, "end")
	// The hub daemon's sockets: its UDP ports (UD, RD) or its ends of the
	// connections to the listener (RC).
	hubMatch := func(local, remote netip.AddrPort) bool {
		if p.ln != nil {
			return remote == p.ln.Addr()
		}
		return int(local.Port()) >= o.portBase-100 && int(local.Port()) < o.portBase
	}
	f, err := h.expect("ready", 4, 60*time.Second)
	if err != nil {
		return r, err
	}
	if r.ClientBefore, err = parseMem(f[2], f[3]); err != nil {
		return r, err
	}
	if f[1] != "-" {
		ep, err := ofverbs.ParseEndpoint(f[1])
		if err != nil {
			return r, fmt.Errorf("hub endpoint: %w", err)
		}
		p.hubKey.Store(ep.QKey) // the peers reply to the address the hub's messages come from
	}
	time.Sleep(o.settle)
	if r.DaemonBefore, err = hd.mem(); err != nil {
		return r, err
	}
	if r.KernelBefore, err = readKernelMem(); err != nil {
		return r, err
	}
	if r.HubBefore, err = readHubSockets(hubMatch); err != nil {
		return r, err
	}
	fmt.Fprintln(h.stdin, "go")
	if f, err = h.expect("done", 4, time.Duration(o.n/10+120)*time.Second); err != nil {
		return r, err
	}
	if r.Replies, err = strconv.Atoi(f[1]); err != nil {
		return r, err
	}
	if r.ClientAfter, err = parseMem(f[2], f[3]); err != nil {
		return r, err
	}
	if p.ln != nil {
		if err := <-accepted; err != nil {
			return r, err
		}
	}
	time.Sleep(o.settle)
	if r.DaemonAfter, err = hd.mem(); err != nil {
		return r, err
	}
	if r.KernelAfter, err = readKernelMem(); err != nil {
		return r, err
	}
	if r.HubAfter, err = readHubSockets(hubMatch); err != nil {
		return r, err
	}
	fmt.Fprintln(h.stdin, "exit")
	r.compute()
	return r, nil
}

func parseMem(rss, pss string) (procMem, error) {
	var m procMem
	var err1, err2 error
	m.RSS, err1 = strconv.ParseInt(rss, 10, 64)
	m.PSS, err2 = strconv.ParseInt(pss, 10, 64)
	return m, errors.Join(err1, err2)
}

// hubProc is the running hub client.
type hubProc struct {
	cmd    *exec.Cmd
	stdin  io.WriteCloser
	lines  chan string
	stderr *syncBuffer
	done   chan struct{}
}

func startHub(sock, typ string, n int) (*hubProc, error) {
	exe, err := os.Executable()
	if err != nil {
		return nil, err
	}
	h := &hubProc{lines: make(chan string, 4), stderr: &syncBuffer{}, done: make(chan struct{})}
	h.cmd = exec.Command(exe, "-role", "hub", "-type", typ, "-socket", sock, "-n", strconv.Itoa(n))
	h.cmd.Stderr = h.stderr
	h.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if h.stdin, err = h.cmd.StdinPipe(); err != nil {
		return nil, err
	}
	stdout, err := h.cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := pinfork.Start(h.cmd); err != nil {
		return nil, err
	}
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			h.lines <- sc.Text()
		}
		close(h.lines)
		h.cmd.Wait()
		close(h.done)
	}()
	return h, nil
}

// expect waits for the hub's line "word" with nfields fields.
func (h *hubProc) expect(word string, nfields int, timeout time.Duration) ([]string, error) {
	select {
	case line, ok := <-h.lines:
		f := strings.Fields(line)
		if !ok || len(f) != nfields || f[0] != word {
			<-h.done
			return nil, fmt.Errorf("hub said %q, want %q: %s", line, word, h.stderr)
		}
		return f, nil
	case <-time.After(timeout):
		return nil, fmt.Errorf("no %q from the hub within %v: %s", word, timeout, h.stderr)
	}
}

func (h *hubProc) close() {
	h.stdin.Close()
	select {
	case <-h.done:
	case <-time.After(10 * time.Second):
		h.cmd.Process.Kill()
		<-h.done
	}
}

// report prints the table and the ratios.
func report(w io.Writer, n int, rs []result) {
	fmt.Fprintf(w, "memory per peer, %d peers (octets; growth over the exchange ÷ peers)\n", n)
	fmt.Fprintf(w, "%-4s %8s %12s %12s %12s %12s %12s %12s\n", "type", "replies", "daemon RSS", "daemon Pss", "client RSS", "client Pss", "kernel", "total")
	byType := map[string]result{}
	for _, r := range rs {
		byType[r.Type] = r
		fmt.Fprintf(w, "%-4s %8d %12d %12d %12d %12d %12d %12d\n", r.Type, r.Replies, r.DaemonRSS, r.DaemonPSS, r.ClientRSS, r.ClientPSS, r.Kernel, r.Total)
	}
	for _, base := range []string{"rc", "rc64"} {
		rc, ok := byType[base]
		if !ok || rc.Total <= 0 {
			continue
		}
		for _, t := range []string{"ud", "rd"} {
			r, ok := byType[t]
			if !ok {
				continue
			}
			verdict := "meets"
			if r.Total*20 > rc.Total {
				verdict = "misses"
			}
			fmt.Fprintf(w, "%s/%s = %.4f (1/%.1f): %s the target of 1/20\n", t, base, float64(r.Total)/float64(rc.Total),
				float64(rc.Total)/float64(max(r.Total, 1)), verdict)
		}
	}
}
