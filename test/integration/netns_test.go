package integration

import (
	"errors"
	"fmt"
	"net/netip"
	"os"
	"testing"
	"time"

	"github.com/iwarpd/iwarpd/test/daemontest"
	"github.com/iwarpd/iwarpd/test/netns"
)

// nsPrefix names this package's namespaces (nsPrefix + PID + a/b);
// leftovers of killed runs are removed by prefix.
const nsPrefix = "iwtest"

// TestNetnsTwoDaemons: one iwarpd in each of two network namespaces joined
// by a veth pair (MTU 1500, 169.254.77.1/24 and 169.254.77.2/24); the test
// process, in its own namespace, is the client of both through their Unix
// sockets. 1,000 round trips and 2,000 streamed messages, sizes 0 B to the
// largest message, every byte verified.
func TestNetnsTwoDaemons(t *testing.T) {
	if ok, why := netns.Available(); !ok {
		t.Skip("skipping the network-namespace test: " + why)
	}
	if err := netns.RemoveStale(nsPrefix); err != nil {
		t.Logf("removing stale namespaces: %v", err)
	}
	addrs := [2]netip.Prefix{netip.MustParsePrefix("169.254.77.1/24"), netip.MustParsePrefix("169.254.77.2/24")}
	pair, err := netns.NewPair(fmt.Sprintf("%s%d", nsPrefix, os.Getpid()), addrs, 1500)
	if errors.Is(err, netns.ErrNotPermitted) {
		t.Skip("skipping the network-namespace test: ", err)
	}
	if err != nil {
		t.Fatal(err)
	}
	// Registered first, so it runs after the daemons' cleanups stopped them.
	t.Cleanup(func() {
		if err := pair.Close(); err != nil {
			t.Errorf("deleting the namespaces: %v", err)
		}
		names, _ := netns.List()
		for _, n := range names {
			if n == pair.Names[0] || n == pair.Names[1] {
				t.Errorf("namespace %s still exists", n)
			}
		}
	})
	da := startDaemon(t, "ns-a", daemontest.Options{NS: pair, NSIdx: 0, Addr: addrs[0].Addr().String()})
	db := startDaemon(t, "ns-b", daemontest.Options{NS: pair, NSIdx: 1, Addr: addrs[1].Addr().String()})
	ctxA, ctxB := da.Open(t, "netns-a"), db.Open(t, "netns-b")
	attr, err := ctxA.QueryDevice()
	if err != nil {
		t.Fatal(err)
	}
	if attr.DatagramSize > 1472 {
		t.Fatalf("datagram size %d does not fit the 1500-octet MTU", attr.DatagramSize)
	}
	maxMsg := int(attr.MaxMsgUD)
	t.Logf("datagram size %d, largest message %d", attr.DatagramSize, attr.MaxMsgUD)
	a := newEndpoint(t, "a", ctxA, endpointOpts{maxMsg: maxMsg, nslots: 32})
	b := newEndpoint(t, "b", ctxB, endpointOpts{maxMsg: maxMsg, nslots: 32})
	for i, e := range []*endpoint{a, b} {
		if e.qp.Addr().Addr() != addrs[i].Addr() {
			t.Fatalf("QP %s has address %v, want one on %v", e.name, e.qp.Addr(), addrs[i].Addr())
		}
	}

	// The window is larger than in ping-pong; the endpoints are shared, so
	// ping-pong runs on the first receives of a window: fine, receives
	// complete in posting order either way.
	start := time.Now()
	st, err := pingPong(a, b, 1000, newSchedule(attr, 250), t.Logf)
	if err != nil {
		t.Fatalf("ping-pong after %d messages: %v\ncounters A %v\ncounters B %v", st.messages, err, da.counters(t), db.counters(t))
	}
	t.Logf("ping-pong across namespaces: %d messages, %d octets in %v, %d retries", st.messages, st.bytes, time.Since(start), st.retries)
	for _, dir := range []struct {
		name     string
		from, to *endpoint
	}{{"a→b", a, b}, {"b→a", b, a}} {
		start := time.Now()
		st, err := stream(dir.from, dir.to, 2000, newSchedule(attr, 1000), t.Logf)
		if err != nil {
			t.Fatalf("stream %s after %d messages: %v\ncounters A %v\ncounters B %v", dir.name, st.messages, err, da.counters(t), db.counters(t))
		}
		if st.messages != 2000 {
			t.Fatalf("stream %s: %d messages", dir.name, st.messages)
		}
		t.Logf("stream %s across namespaces: %d messages, %d octets in %v, %d retries", dir.name, st.messages, st.bytes, time.Since(start), st.retries)
	}
	// The traffic really crossed the veth: each daemon saw datagrams.
	for _, d := range []*daemon{da, db} {
		if c := d.counters(t); c["datagrams_in"] == 0 || c["datagrams_out"] == 0 {
			t.Errorf("daemon %s counters %v", d.Name, c)
		}
	}
}
