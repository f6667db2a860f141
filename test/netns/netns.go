package netns

import (
	"bytes"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"syscall"
)

// Available reports whether namespaces can be made here, and if not, why
// (a sentence fit for t.Skip).
func Available() (ok bool, why string) {
	if os.Geteuid() != 0 {
		return false, "network namespaces need root (run the tests as root to include them)"
	}
	if _, err := exec.LookPath("ip"); err != nil {
		return false, "the ip tool of iproute2 is not installed (apt-get install iproute2)"
	}
	if _, err := os.Stat("/proc/self/ns/net"); err != nil {
		return false, "this kernel has no network namespaces: " + err.Error()
	}
	return true, ""
}

// ErrNotPermitted means the kernel refused (root without CAP_NET_ADMIN or
// CAP_SYS_ADMIN, as in an unprivileged container).
var ErrNotPermitted = errors.New("netns: operation not permitted")

// ip runs the ip tool and returns its error with its output.
func ip(args ...string) error {
	out, err := exec.Command("ip", args...).CombinedOutput()
	if err != nil {
		if bytes.Contains(out, []byte("Operation not permitted")) {
			err = fmt.Errorf("%w (%v)", ErrNotPermitted, err)
		}
		return fmt.Errorf("netns: ip %s: %w: %s", strings.Join(args, " "), err, bytes.TrimSpace(out))
	}
	return nil
}

// List returns the names of the existing named network namespaces.
func List() ([]string, error) {
	out, err := exec.Command("ip", "netns", "list").Output()
	if err != nil {
		return nil, fmt.Errorf("netns: ip netns list: %w", err)
	}
	var names []string
	for _, line := range strings.Split(string(out), "\n") {
		// "name" or "name (id: 3)"
		if f := strings.Fields(line); len(f) > 0 {
			names = append(names, f[0])
		}
	}
	return names, nil
}

// RemoveStale deletes the namespaces left behind by killed runs: those
// named prefix + the decimal PID of their creator + anything, whose creator
// no longer runs (so that runs in parallel leave each other alone; name
// your pairs prefix+strconv.Itoa(os.Getpid())). Other names are left
// alone. An empty prefix is refused.
func RemoveStale(prefix string) error {
	if prefix == "" {
		return errors.New("netns: RemoveStale needs a non-empty prefix")
	}
	names, err := List()
	if err != nil {
		return err
	}
	var errs []error
	for _, n := range names {
		rest, ok := strings.CutPrefix(n, prefix)
		digits := len(rest) - len(strings.TrimLeft(rest, "0123456789"))
		if !ok || digits == 0 {
			continue
		}
		pid, err := strconv.Atoi(rest[:digits])
		if err != nil || processRuns(pid) {
			continue
		}
		if err := ip("netns", "delete", n); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// processRuns reports whether a process with this PID exists.
func processRuns(pid int) bool {
	err := syscall.Kill(pid, 0)
	return err == nil || errors.Is(err, syscall.EPERM)
}

// Pair is two namespaces joined by a veth pair.
type Pair struct {
	Names [2]string       // namespace names
	Links [2]string       // veth interface names, Links[i] inside Names[i]
	Addrs [2]netip.Prefix // the address of each end
}

// NewPair creates namespaces prefix+"a" and prefix+"b", a veth pair between
// them with the given MTU, gives end i the address addrs[i], and brings
// every link (and each namespace's loopback) up; a namespace of either
// name that already exists (left by a killed run) is deleted first. On
// failure it removes what it made. prefix must be short: interface names are limited to 15
// octets, so the veth ends are named "vw" plus a hash of the prefix.
func NewPair(prefix string, addrs [2]netip.Prefix, mtu int) (*Pair, error) {
	if prefix == "" {
		return nil, errors.New("netns: NewPair needs a non-empty prefix")
	}
	var h uint32 = 2166136261
	for i := 0; i < len(prefix); i++ {
		h = (h ^ uint32(prefix[i])) * 16777619
	}
	p := &Pair{
		Names: [2]string{prefix + "a", prefix + "b"},
		Links: [2]string{fmt.Sprintf("vw%08xa", h), fmt.Sprintf("vw%08xb", h)},
		Addrs: addrs,
	}
	made := 0
	fail := func(err error) (*Pair, error) {
		for _, n := range p.Names[:made] {
			ip("netns", "delete", n)
		}
		return nil, err
	}
	for _, n := range p.Names {
		// A namespace of this very name is stale: the caller names its
		// pairs after its own PID, and PIDs are reused (pid_max is often
		// 32768), so a killed earlier run may have left it. RemoveStale
		// keeps it (its "creator" — this process — runs): delete it here.
		if names, err := List(); err == nil && slices.Contains(names, n) {
			if err := ip("netns", "delete", n); err != nil {
				return fail(err)
			}
		}
		if err := ip("netns", "add", n); err != nil {
			return fail(err)
		}
		made++
	}
	// Create the pair inside the first namespace, then move its peer: the
	// caller's namespace never holds either end.
	if err := ip("-n", p.Names[0], "link", "add", p.Links[0], "mtu", fmt.Sprint(mtu), "type", "veth",
		"peer", "name", p.Links[1], "mtu", fmt.Sprint(mtu), "netns", p.Names[1]); err != nil {
		return fail(err)
	}
	for i := range 2 {
		for _, args := range [][]string{
			{"-n", p.Names[i], "addr", "add", addrs[i].String(), "dev", p.Links[i]},
			{"-n", p.Names[i], "link", "set", p.Links[i], "up"},
			{"-n", p.Names[i], "link", "set", "lo", "up"},
		} {
			if err := ip(args...); err != nil {
				return fail(err)
			}
		}
	}
	return p, nil
}

// Command returns a command that runs name with args inside namespace i
// (0 or 1) of the pair.
func (p *Pair) Command(i int, name string, args ...string) *exec.Cmd {
	return exec.Command("ip", append([]string{"netns", "exec", p.Names[i], name}, args...)...)
}

// Close deletes both namespaces (and with them the veth pair). Processes
// still running inside keep their namespace alive until they exit, but its
// name is gone.
func (p *Pair) Close() error {
	var errs []error
	for _, n := range p.Names {
		if err := ip("netns", "delete", n); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}
