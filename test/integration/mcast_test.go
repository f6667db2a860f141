package integration

import (
	"bytes"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/iwarpd/iwarpd/ofverbs"
	"github.com/iwarpd/iwarpd/test/daemontest"
	"github.com/iwarpd/iwarpd/test/netns"
)

// mcastNet is three network namespaces whose veths meet on a bridge in a
// fourth.
type mcastNet struct {
	names [4]string // a, b, c, then the bridge's
	links [3]string // the veth end inside names[i]
	addrs [3]netip.Addr
}

// mcastTestQKey is the Q_Key the group's members share.
const mcastTestQKey = 0x6d63_6173

func ipCmd(args ...string) error {
	out, err := exec.Command("ip", args...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("ip %s: %v: %s", strings.Join(args, " "), err, bytes.TrimSpace(out))
	}
	return nil
}

func newMcastNet(prefix string, tag int) (*mcastNet, error) {
	n := &mcastNet{}
	for i, s := range []string{"a", "b", "c", "br"} {
		n.names[i] = prefix + s
	}
	made := 0
	fail := func(err error) (*mcastNet, error) {
		for _, name := range n.names[:made] {
			ipCmd("netns", "delete", name)
		}
		return nil, err
	}
	existing, err := netns.List()
	if err != nil {
		return nil, err
	}
	for _, name := range n.names {
		// Named after our PID: one that exists is a killed earlier
		// run's whose PID we reuse (RemoveStale keeps it, we run).
		if slices.Contains(existing, name) {
			if err := ipCmd("netns", "delete", name); err != nil {
				return fail(err)
			}
		}
		if err := ipCmd("netns", "add", name); err != nil {
			return fail(err)
		}
		made++
	}
	br := n.names[3]
	for _, args := range [][]string{
		{"-n", br, "link", "add", "br0", "type", "bridge", "mcast_snooping", "0"},
		{"-n", br, "link", "set", "br0", "up"},
	} {
		if err := ipCmd(args...); err != nil {
			return fail(err)
		}
	}
	for i := range 3 {
		n.links[i] = fmt.Sprintf("vm%d%c", tag, 'a'+i)
		peer := n.links[i] + "p"
		n.addrs[i] = netip.AddrFrom4([4]byte{169, 254, 78, byte(i + 1)})
		for _, args := range [][]string{
			{"-n", n.names[i], "link", "add", n.links[i], "type", "veth", "peer", "name", peer, "netns", br},
			{"-n", br, "link", "set", peer, "master", "br0"},
			{"-n", br, "link", "set", peer, "up"},
			{"-n", n.names[i], "addr", "add", n.addrs[i].String() + "/24", "dev", n.links[i]},
			{"-n", n.names[i], "link", "set", n.links[i], "up"},
			{"-n", n.names[i], "link", "set", "lo", "up"},
		} {
			if err := ipCmd(args...); err != nil {
				return fail(err)
			}
		}
	}
	return n, nil
}

func (n *mcastNet) close() error {
	var errs []error
	for _, name := range n.names {
		if err := ipCmd("netns", "delete", name); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// pollOne waits (bounded) for one completion of cq.
func pollOne(t *testing.T, cq *ofverbs.CQ, what string, limit time.Duration) (ofverbs.WC, bool) {
	t.Helper()
	wc := make([]ofverbs.WC, 1)
	deadline := time.Now().Add(limit)
	for time.Now().Before(deadline) {
		n, err := cq.Poll(wc)
		if err != nil {
			t.Fatalf("%s: poll: %v", what, err)
		}
		if n == 1 {
			return wc[0], true
		}
		time.Sleep(100 * time.Microsecond)
	}
	return ofverbs.WC{}, false
}

// TestMulticastNamespaces: three daemons, each in its own network namespace,
// the namespaces joined by a bridge (in a fourth). A UD QP in each daemon
// attaches to one IPv4 group; a Send from a fourth QP (in the first
// namespace) to the group's address handle reaches all three, payload
// intact, single- and multi-datagram; after one member detaches it gets
// nothing more, the others still do.
func TestMulticastNamespaces(t *testing.T) {
	if ok, why := netns.Available(); !ok {
		t.Skip("skipping the network-namespace test: " + why)
	}
	const prefix = "iwmc"
	netns.RemoveStale(prefix)
	net, err := newMcastNet(fmt.Sprintf("%s%d", prefix, os.Getpid()), os.Getpid()%100000)
	if err != nil {
		if errors.Is(err, netns.ErrNotPermitted) || strings.Contains(err.Error(), "Operation not permitted") {
			t.Skip("skipping the network-namespace test: ", err)
		}
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := net.close(); err != nil {
			t.Errorf("deleting the namespaces: %v", err)
		}
	})
	group := netip.AddrPortFrom(netip.MustParseAddr("239.255.78.1"), uint16(31000+os.Getpid()%1000))
	var members []*endpoint
	var sender *endpoint
	var daemons []*daemon
	for i := range 3 {
		ns := &netns.Pair{Names: [2]string{net.names[i], net.names[i]}}
		d := startDaemon(t, fmt.Sprintf("mcast-%c", 'a'+i), daemontest.Options{NS: ns, Addr: net.addrs[i].String(),
			Extra: []string{"-mcast-if", net.links[i], "-mcast-ttl", "1", "-mcast-loop", "true"}})
		daemons = append(daemons, d)
		ctx := d.Open(t, fmt.Sprintf("mcast-member-%d", i))
		// Every member of a group shares its Q_Key, as on InfiniBand.
		m := newEndpoint(t, fmt.Sprintf("member %d", i), ctx, endpointOpts{maxMsg: 4096, nslots: 4, qkey: mcastTestQKey})
		if err := m.qp.AttachMcast(group); err != nil {
			t.Fatalf("member %d: attach %v: %v", i, group, err)
		}
		members = append(members, m)
		if i == 0 {
			sender = newEndpoint(t, "sender", d.Open(t, "mcast-sender"), endpointOpts{maxMsg: 4096})
		}
	}
	ah := sender.ahTo(t, ofverbs.Endpoint{Addr: group, QKey: mcastTestQKey})
	slot := make([]int, len(members)) // the slot each member's next receive fills
	send := func(k, size int, want []bool) {
		t.Helper()
		msg := sender.message(k, size)
		if n, err := sender.qp.PostSend([]ofverbs.SendWR{{ID: uint64(k), Opcode: ofverbs.WRSend, Signaled: true, AH: ah,
			SGL: []ofverbs.SGE{sender.mr.SGE(msg)}}}); n != 1 {
			t.Fatalf("post send: %v", err)
		}
		if wc, ok := pollOne(t, sender.scq, "send", scaled(10*time.Second)); !ok || wc.Status != ofverbs.WCSuccess {
			t.Fatalf("send %d: %+v (completed %v)", k, wc, ok)
		}
		for i, m := range members {
			limit := scaled(10 * time.Second)
			if !want[i] {
				limit = scaled(300 * time.Millisecond)
			}
			wc, ok := pollOne(t, m.rcq, m.name, limit)
			if !want[i] {
				if ok {
					t.Fatalf("message %d reached detached %s: %+v", k, m.name, wc)
				}
				continue
			}
			if !ok {
				t.Fatalf("message %d (%d octets) did not reach %s; counters %v", k, size, m.name, daemons[i].counters(t))
			}
			if wc.Status != ofverbs.WCSuccess || int(wc.ByteLen) != size || wc.Src != sender.qp.Addr() || wc.ID != uint64(slot[i]) {
				t.Fatalf("%s: completion %+v, want %d octets from %v in slot %d", m.name, wc, size, sender.qp.Addr(), slot[i])
			}
			if !bytes.Equal(m.slot(slot[i])[:size], msg) {
				t.Fatalf("%s: message %d differs", m.name, k)
			}
			if err := m.postSlot(slot[i]); err != nil {
				t.Fatal(err)
			}
			slot[i] = (slot[i] + 1) % 4
		}
	}
	all := []bool{true, true, true}
	for k, size := range []int{1, 100, 3000, 4096} {
		send(k, size, all)
	}
	if err := members[1].qp.DetachMcast(group); err != nil {
		t.Fatal(err)
	}
	if err := members[1].qp.DetachMcast(group); err == nil {
		t.Error("second detach succeeded")
	}
	for k, size := range []int{200, 3000} {
		send(10+k, size, []bool{true, false, true})
	}
}
