package integration

import (
	"testing"
	"time"

	"github.com/iwarpd/iwarpd/test/daemontest"
)

// TestLoopbackTwoDaemons: two iwarpd processes on 127.0.0.1 with their own
// sockets and port blocks; the test process is a client of both. 5,000
// round trips (10,000 messages) of every interesting size — 0, 1, 63, 1024,
// one full datagram, one datagram + 1, several datagrams, 64 KiB, and the
// largest message DeviceAttr.MaxMsgUD every 200th round — then 10,000
// messages streamed in each direction under a receive window. Every byte of
// every message is checked at its receiver.
//
// The daemons run on their defaults (on loopback a large datagram size);
// TestLoopbackEthernetDatagrams repeats it all with the 1472-octet
// datagrams of a 1500-octet MTU, where the largest message is hundreds of
// datagrams.
func TestLoopbackTwoDaemons(t *testing.T) { loopback(t) }

func TestLoopbackEthernetDatagrams(t *testing.T) { loopback(t, "-datagram-size", "1472") }

func loopback(t *testing.T, flags ...string) {
	da := startDaemon(t, "lo-a", daemontest.Options{Extra: flags})
	db := startDaemon(t, "lo-b", daemontest.Options{Extra: flags})
	ctxA, ctxB := da.Open(t, "loopback-a"), db.Open(t, "loopback-b")
	attr, err := ctxA.QueryDevice()
	if err != nil {
		t.Fatal(err)
	}
	if attr.MaxMsgUD < 65536*2 || attr.DatagramSize < 64 {
		t.Fatalf("device attributes %+v: max message or datagram size too small for this test", attr)
	}
	maxMsg := int(attr.MaxMsgUD)
	t.Logf("datagram size %d, largest message %d", attr.DatagramSize, attr.MaxMsgUD)

	t.Run("PingPong", func(t *testing.T) {
		a := newEndpoint(t, "a", ctxA, endpointOpts{maxMsg: maxMsg, nslots: 2})
		b := newEndpoint(t, "b", ctxB, endpointOpts{maxMsg: maxMsg, nslots: 2})
		sched := newSchedule(attr, 200)
		start := time.Now()
		st, err := pingPong(a, b, 5000, sched, t.Logf)
		if err != nil {
			t.Fatalf("after %d messages: %v\ncounters A %v\ncounters B %v", st.messages, err, da.counters(t), db.counters(t))
		}
		if st.messages != 10000 {
			t.Fatalf("%d messages verified, want 10000", st.messages)
		}
		t.Logf("ping-pong: %d messages, %d octets verified in %v, %d large-message retries", st.messages, st.bytes, time.Since(start), st.retries)
	})

	t.Run("Stream", func(t *testing.T) {
		const window = 64
		a := newEndpoint(t, "a", ctxA, endpointOpts{maxMsg: maxMsg, nslots: window})
		b := newEndpoint(t, "b", ctxB, endpointOpts{maxMsg: maxMsg, nslots: window})
		sched := newSchedule(attr, 2500)
		for _, dir := range []struct {
			name     string
			from, to *endpoint
		}{{"a→b", a, b}, {"b→a", b, a}} {
			start := time.Now()
			st, err := stream(dir.from, dir.to, 10000, sched, t.Logf)
			if err != nil {
				t.Fatalf("%s: after %d messages: %v\ncounters A %v\ncounters B %v", dir.name, st.messages, err, da.counters(t), db.counters(t))
			}
			if st.messages != 10000 {
				t.Fatalf("%s: %d messages verified, want 10000", dir.name, st.messages)
			}
			t.Logf("stream %s: %d messages, %d octets verified in %v, %d large-message retries", dir.name, st.messages, st.bytes, time.Since(start), st.retries)
		}
	})

	// Nothing was dropped for want of a receive: the window held.
	for _, d := range []*daemon{da, db} {
		c := d.counters(t)
		if c["drop_no_recv"] != 0 || c["drop_crc"] != 0 || c["recv_too_long"] != 0 {
			t.Errorf("daemon %s counters: %v", d.Name, c)
		}
	}
}
