package netns

import (
	"errors"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"slices"
	"strings"
	"testing"
)

func TestPairAndRemoveStale(t *testing.T) {
	if ok, why := Available(); !ok {
		t.Skip(why)
	}
	addrs := [2]netip.Prefix{netip.MustParsePrefix("169.254.77.1/24"), netip.MustParsePrefix("169.254.77.2/24")}
	p, err := NewPair(fmt.Sprintf("iwnstest%d", os.Getpid()), addrs, 1500)
	if errors.Is(err, ErrNotPermitted) {
		t.Skip(err)
	}
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	names, err := List()
	if err != nil || !slices.Contains(names, p.Names[0]) || !slices.Contains(names, p.Names[1]) {
		t.Fatalf("List() = %v, %v; want %v", names, err, p.Names)
	}
	for i := range 2 {
		out, err := p.Command(i, "ip", "-o", "addr", "show", "dev", p.Links[i]).CombinedOutput()
		if err != nil || !strings.Contains(string(out), addrs[i].String()) || !strings.Contains(string(out), p.Links[i]) {
			t.Errorf("namespace %s: %v\n%s", p.Names[i], err, out)
		}
		out, err = p.Command(i, "ip", "-o", "link", "show", "dev", p.Links[i]).CombinedOutput()
		if err != nil || !strings.Contains(string(out), "mtu 1500") || !strings.Contains(string(out), "UP") {
			t.Errorf("link %s: %v\n%s", p.Links[i], err, out)
		}
	}
	// The caller's namespace holds neither end.
	if err := exec.Command("ip", "link", "show", "dev", p.Links[0]).Run(); err == nil {
		t.Errorf("veth end %s visible outside the namespaces", p.Links[0])
	}
	// RemoveStale leaves a live creator's namespaces alone...
	if err := RemoveStale("iwnstest"); err != nil {
		t.Fatal(err)
	}
	if names, _ := List(); !slices.Contains(names, p.Names[0]) {
		t.Fatal("RemoveStale removed the namespace of a running process")
	}
	// ...and removes a dead one's (PID 0x7ffffffe is never a process).
	stale := &Pair{Names: [2]string{"iwnstest2147483646a", "iwnstest2147483646b"}}
	for _, n := range stale.Names {
		if err := ip("netns", "add", n); err != nil {
			t.Fatal(err)
		}
	}
	if err := RemoveStale("iwnstest"); err != nil {
		t.Fatal(err)
	}
	names, _ = List()
	if slices.Contains(names, stale.Names[0]) || slices.Contains(names, stale.Names[1]) {
		stale.Close()
		t.Fatalf("stale namespaces survived: %v", names)
	}
	if err := p.Close(); err != nil {
		t.Fatal(err)
	}
	if names, _ := List(); slices.Contains(names, p.Names[0]) || slices.Contains(names, p.Names[1]) {
		t.Fatalf("Close left %v", names)
	}
	if err := RemoveStale(""); err == nil {
		t.Error("RemoveStale with an empty prefix accepted")
	}
}
