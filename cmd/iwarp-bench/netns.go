package main

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// The veth scenario's two "hosts": a network namespace each, joined by a veth
// pair at MTU 1500. The addresses exist only inside those namespaces.
const (
	netnsPrefix = "iwarp-bench-" // + PID + "-a" / "-b"
	vethAddrA   = "169.254.78.1"
	vethAddrB   = "169.254.78.2"
	vethMTU     = 1500
)

// vethUnavailable says why the veth scenario cannot run here ("" if it can).
func vethUnavailable() string {
	if os.Geteuid() != 0 {
		return "needs root and iproute2 (not root)"
	}
	if _, err := exec.LookPath("ip"); err != nil {
		return "needs root and iproute2 (no ip command; scripts/install-bench-deps.sh installs it)"
	}
	return ""
}

func ipCmd(args ...string) error {
	out, err := exec.Command("ip", args...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("ip %s: %v: %s", strings.Join(args, " "), err, strings.TrimSpace(string(out)))
	}
	return nil
}

// deleteStaleNamespaces removes namespaces left by an iwarp-bench that is no
// longer running (its PID is in the name).
func deleteStaleNamespaces() {
	out, err := exec.Command("ip", "netns", "list").Output()
	if err != nil {
		return
	}
	for _, line := range strings.Split(string(out), "\n") {
		f := strings.Fields(line)
		if len(f) == 0 || !strings.HasPrefix(f[0], netnsPrefix) {
			continue
		}
		rest := strings.TrimPrefix(f[0], netnsPrefix)
		pidText, _, _ := strings.Cut(rest, "-")
		pid, err := strconv.Atoi(pidText)
		if err == nil && pid != os.Getpid() && errors.Is(unix.Kill(pid, 0), unix.ESRCH) {
			ipCmd("netns", "del", f[0])
		}
	}
}

// setupVeth creates the two namespaces and the veth pair between them, and
// registers their removal with s. It returns the namespace names.
func (s *session) setupVeth() (nsA, nsB string, err error) {
	deleteStaleNamespaces()
	pid := strconv.Itoa(os.Getpid())
	nsA, nsB = netnsPrefix+pid+"-a", netnsPrefix+pid+"-b"
	devA, devB := vethDevs()
	for _, ns := range []string{nsA, nsB} {
		if err := ipCmd("netns", "add", ns); err != nil {
			return "", "", err
		}
		s.onClose(func() { ipCmd("netns", "del", ns) })
	}
	if err := ipCmd("link", "add", devA, "netns", nsA, "mtu", strconv.Itoa(vethMTU), "type", "veth",
		"peer", "name", devB, "netns", nsB, "mtu", strconv.Itoa(vethMTU)); err != nil {
		return "", "", err
	}
	for _, side := range []struct{ ns, dev, addr string }{{nsA, devA, vethAddrA}, {nsB, devB, vethAddrB}} {
		for _, args := range [][]string{
			{"-n", side.ns, "link", "set", "lo", "up"},
			{"-n", side.ns, "addr", "add", side.addr + "/24", "dev", side.dev},
			{"-n", side.ns, "link", "set", side.dev, "up"},
		} {
			if err := ipCmd(args...); err != nil {
				return "", "", err
			}
		}
	}
	return nsA, nsB, nil
}

// vethDevs names the two ends of the veth pair (at most 15 octets).
func vethDevs() (devA, devB string) {
	pid := strconv.Itoa(os.Getpid())
	return "iwb" + pid + "a", "iwb" + pid + "b"
}

// The loss of the veth scenario is made with nftables, not netem (many
// kernels, this one included, have no sch_netem: "Specified qdisc kind is
// unknown"): a table inet iwarp_bench in each namespace whose input chain
// drops pct % of the TCP and UDP packets it receives, chosen by numgen
// random. The drop must hit single wire packets: a UDP GSO send (the
// daemons' default) or a TCP TSO send is one buffer of up to 64 packets
// until the device segments it, and veth passes such buffers through
// unsegmented, so a drop in the output hook — or in the peer's input hook,
// with the veth's default gso_max_segs — would lose a whole burst at once.
// The loss runs therefore set gso_max_segs 1 on both veth ends (the kernel
// then segments every GSO/TSO buffer in software before the device,
// netif_skb_features/validate_xmit_skb) and the drop sits on the receiving
// side's input hook, where every packet is one wire packet of at most the
// MTU (docs/benchmarks.md, "Loss without netem").
const nftTable = "iwarp_bench"

func nft(ns string, args ...string) error {
	all := append([]string{"netns", "exec", ns, "nft"}, args...)
	if out, err := exec.Command("ip", all...).CombinedOutput(); err != nil {
		return fmt.Errorf("nft %s (netns %s): %v: %s", strings.Join(args, " "), ns, err, strings.TrimSpace(string(out)))
	}
	return nil
}

// setWirePackets sets gso_max_segs 1 on both veth ends (on) or back to the
// kernel's default, 65535 (off). On for the loss runs only, the lossless
// one included, so that the ratio compares like with like: a veth without
// GSO/TSO moves raw TCP an order of magnitude slower, which the other veth
// runs must not pay.
func setWirePackets(nsA, nsB string, on bool) error {
	segs := "65535"
	if on {
		segs = "1"
	}
	devA, devB := vethDevs()
	for _, side := range []struct{ ns, dev string }{{nsA, devA}, {nsB, devB}} {
		if err := ipCmd("-n", side.ns, "link", "set", side.dev, "gso_max_segs", segs); err != nil {
			return err
		}
	}
	return nil
}

// setLoss makes each namespace drop pct % of the TCP and UDP packets it
// receives (0: none): both directions lose pct %, packet by packet. The
// first call creates the tables (and fails where nftables is missing).
func setLoss(nsA, nsB string, pct int) error {
	for _, ns := range []string{nsA, nsB} {
		if err := nft(ns, "add", "table", "inet", nftTable); err != nil {
			return err
		}
		if err := nft(ns, "add", "chain", "inet", nftTable, "in", "{ type filter hook input priority 0 ; }"); err != nil {
			return err
		}
		if err := nft(ns, "flush", "chain", "inet", nftTable, "in"); err != nil {
			return err
		}
		if pct > 0 {
			if err := nft(ns, "add", "rule", "inet", nftTable, "in", "meta", "l4proto", "{", "tcp", ",", "udp", "}",
				"numgen", "random", "mod", "100", "<", strconv.Itoa(pct), "drop"); err != nil {
				return err
			}
		}
	}
	return nil
}
