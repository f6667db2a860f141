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

// setNetemLoss makes each veth end drop rate (e.g. "1%") of the packets it
// sends, with a netem root qdisc; rate "" removes the qdiscs.
func setNetemLoss(nsA, nsB, rate string) error {
	devA, devB := vethDevs()
	for _, side := range []struct{ ns, dev string }{{nsA, devA}, {nsB, devB}} {
		args := []string{"-n", side.ns, "qdisc", "replace", "dev", side.dev, "root", "netem", "loss", rate}
		if rate == "" {
			args = []string{"-n", side.ns, "qdisc", "del", "dev", side.dev, "root"}
		}
		if out, err := exec.Command("tc", args...).CombinedOutput(); err != nil {
			return fmt.Errorf("tc %s: %v: %s", strings.Join(args, " "), err, strings.TrimSpace(string(out)))
		}
	}
	return nil
}
