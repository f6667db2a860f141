package hostile

import (
	"fmt"
	"math/rand/v2"
	"net"
	"net/netip"
	"sync"
	"testing"
	"time"

	"github.com/iwarpd/iwarpd/llp/dgram"
	"github.com/iwarpd/iwarpd/ofverbs"
	"github.com/iwarpd/iwarpd/test/daemontest"
)

// Issue 13 point 3: out-of-order RD DATA from many source addresses.
// Before the fix every source became a peer and each datagram was copied
// into the reorder store (124 spoofed ports: 17 → 684 MB in 6 s), and junk
// drew RESETs and ACKs (a reflection vector).

// The flood's datagrams carry 60000 octets of payload (one packet on
// loopback).
const floodPayload = 60000

// Reorder-store bounds given to the victim daemons: 8 MiB per QP, 16 MiB
// for the daemon.
var storeFlags = []string{"-rd-reorder-qp-bytes", "8388608", "-rd-reorder-bytes", "16777216"}

// rssSlack is the growth of the daemon's RSS allowed under a flood: the
// bounded store (8 MiB) and the garbage collector's headroom. Unbounded,
// the same floods grew it by hundreds of MB.
const rssSlack = 64 << 20

// TestRDSpoofedFlood: 124 spoofed source ports each send 48 out-of-order
// DATA datagrams (no cookie: they never receive the Challenges) while a
// well-behaved RD flow runs on the same daemon. Nothing is held for them,
// the daemon's RSS stays bounded, the replies (Challenges and RESETs) stay
// within their limits and are never larger than the datagram they answer,
// and the flow completes with every octet checked.
func TestRDSpoofedFlood(t *testing.T) {
	raw := openRawUDP(t)
	d := daemontest.Start(t, "rd-spoofed", daemontest.Options{Ports: nextPorts(),
		Extra: append([]string{"-rd-ports", nextRDPorts()}, storeFlags...)})
	victim := newRDQP(t, "victim", d.Open(t, "victim"), 16*65536)
	sender := newRDQP(t, "sender", d.Open(t, "sender"), 32*65536)
	if err := rdFlow(sender, victim, 4, 65536); err != nil { // the flow proves itself first
		t.Fatal(err)
	}
	// Some of the spoofed ports are ours: the replies sent there arrive.
	const listeners = 8
	var (
		mu      sync.Mutex
		replies = map[uint16]int{}
		bad     []string
		wg      sync.WaitGroup
	)
	stop := make(chan struct{})
	spoofPort := func(i int) uint16 {
		if i < listeners {
			return uint16(rdListenBase + i) // bound below
		}
		return uint16(61000 + i) // never bound (above the ephemeral range)
	}
	for i := range listeners {
		pc, err := net.ListenUDP("udp4", net.UDPAddrFromAddrPort(netip.AddrPortFrom(netip.MustParseAddr("127.0.0.1"), spoofPort(i))))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { pc.Close() })
		wg.Add(1)
		go func() {
			defer wg.Done()
			buf := make([]byte, 65536)
			for {
				select {
				case <-stop:
					return
				default:
				}
				pc.SetReadDeadline(time.Now().Add(50 * time.Millisecond))
				n, _, err := pc.ReadFromUDPAddrPort(buf)
				if err != nil {
					continue
				}
				p, err := dgram.ParseRD(buf[:n], true)
				mu.Lock()
				replies[spoofPort(i)]++
				if err != nil || p.RD.Type != dgram.RDAck || p.RD.Flags&(dgram.FlagChallenge|dgram.FlagReset) == 0 || n > floodPayload {
					bad = append(bad, fmt.Sprintf("reply of %d octets: %+v %v", n, p.RD, err))
				}
				mu.Unlock()
			}
		}()
	}
	base := vmRSS(t, d.PID())
	before := qpCounters(t, d, victim.qp.Addr())
	start := time.Now()
	flow := make(chan error, 1)
	go func() { flow <- rdFlow(sender, victim, 300, 65536) }()
	const ports, perPort = 124, 48
	rng := rand.New(rand.NewPCG(1, 2))
	for s := range perPort {
		for p := range ports {
			echo := uint32(0)
			if s%2 == 1 {
				echo = rng.Uint32() | 1 // "for a previous life": draws RESETs
			}
			b := rdData(victim.qp.QKey(), rng.Uint32()|1, echo, uint32(2+s), rng.Uint32(), floodPayload)
			if err := raw.send(spoofPort(p), victim.qp.Addr(), b); err != nil {
				t.Fatalf("raw send: %v", err)
			}
		}
	}
	if err := <-flow; err != nil {
		t.Fatalf("well-behaved flow beside the flood: %v", err)
	}
	time.Sleep(100 * time.Millisecond) // the last replies
	dur := time.Since(start)
	close(stop)
	wg.Wait()
	d.CheckAlive(t)
	grown := vmRSS(t, d.PID()) - base
	after := qpCounters(t, d, victim.qp.Addr())
	delta := func(k string) int64 { return after[k] - before[k] }
	t.Logf("%d spoofed datagrams of %d octets in %v: RSS %+d KiB, unproven %d, challenges %d, resets sent %d, replies limited %d, held now %d octets, peers %d",
		ports*perPort, floodPayload, dur, grown>>10, delta("rd_unproven"), delta("rd_challenges"), delta("rd_resets_sent"),
		delta("rd_replies_limited"), after["rd_held_bytes"], after["rd_peers"])
	if grown > rssSlack {
		t.Errorf("daemon RSS grew by %d MiB under the flood, want ≤ %d MiB", grown>>20, rssSlack>>20)
	}
	if after["rd_peers"] != 1 || after["rd_held_bytes"] > 8<<20 {
		t.Errorf("victim QP: %d peers (want the sender only), held %d octets", after["rd_peers"], after["rd_held_bytes"])
	}
	if delta("rd_unproven") == 0 {
		t.Errorf("no datagram counted unproven: %v", after)
	}
	// Replies: within the QP's bucket (100 at once, 2000/s) over the whole
	// run (plus a second of slack for the clocks' offsets).
	sent := delta("rd_challenges") + delta("rd_resets_sent")
	if limit := int64(100 + 2000*(dur.Seconds()+1)); sent > limit {
		t.Errorf("%d replies to unproven sources in %v, want ≤ %d", sent, dur, limit)
	}
	mu.Lock()
	defer mu.Unlock()
	for _, b := range bad {
		t.Error(b)
	}
	// Per address: a burst of 4, then one per 5 ms.
	for port, n := range replies {
		if limit := 4 + int(dur/(5*time.Millisecond)) + 1; n > limit {
			t.Errorf("%d replies to port %d in %v, want ≤ %d", n, port, dur, limit)
		}
	}
}

// TestRDProvenFlood: a hostile peer that does prove itself — 32 real
// sockets answer the Challenge with the cookie — then sends out-of-order
// DATA only (sequence 1 never comes): 32 × 128 datagrams of 60 KB, 245 MB
// unbounded. The reorder store stays within -rd-reorder-qp-bytes, the
// daemon's RSS stays bounded, and a well-behaved flow beside it completes.
func TestRDProvenFlood(t *testing.T) {
	d := daemontest.Start(t, "rd-proven", daemontest.Options{Ports: nextPorts(),
		Extra: append([]string{"-rd-ports", nextRDPorts()}, storeFlags...)})
	victim := newRDQP(t, "victim", d.Open(t, "victim"), 16*65536)
	sender := newRDQP(t, "sender", d.Open(t, "sender"), 32*65536)
	if err := rdFlow(sender, victim, 4, 65536); err != nil {
		t.Fatal(err)
	}
	base := vmRSS(t, d.PID())
	const socks, perSock = 32, 128
	conns := make([]*net.UDPConn, socks)
	cookies := make([]uint32, socks)
	incs := make([]uint32, socks)
	to := net.UDPAddrFromAddrPort(victim.qp.Addr())
	buf := make([]byte, 65536)
	for i := range socks {
		c, err := net.DialUDP("udp4", nil, to)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		c.SetWriteBuffer(4 << 20)
		conns[i], incs[i] = c, uint32(0x1000+i)
		// The handshake: DATA without cookie, the Challenge back. The
		// per-address limit allows a burst; retry after its interval.
		for try := 0; cookies[i] == 0 && try < 50; try++ {
			if _, err := c.Write(rdData(victim.qp.QKey(), incs[i], 0, 2, 0, 100)); err != nil {
				t.Fatal(err)
			}
			c.SetReadDeadline(time.Now().Add(daemontest.Scaled(200 * time.Millisecond)))
			n, err := c.Read(buf)
			if err != nil {
				continue
			}
			if p, err := dgram.ParseRD(buf[:n], true); err == nil && p.RD.Flags&dgram.FlagChallenge != 0 {
				cookies[i] = p.RD.CumAck
			}
		}
		if cookies[i] == 0 {
			t.Fatalf("socket %d: no Challenge in 50 tries", i)
		}
	}
	flow := make(chan error, 1)
	go func() { flow <- rdFlow(sender, victim, 300, 65536) }()
	for s := range perSock {
		for i, c := range conns {
			if _, err := c.Write(rdData(victim.qp.QKey(), incs[i], 0, uint32(2+s), cookies[i], floodPayload)); err != nil {
				t.Fatalf("socket %d: %v", i, err)
			}
		}
	}
	if err := <-flow; err != nil {
		t.Fatalf("well-behaved flow beside the flood: %v", err)
	}
	d.CheckAlive(t)
	grown := vmRSS(t, d.PID()) - base
	cs := qpCounters(t, d, victim.qp.Addr())
	t.Logf("%d proven out-of-order datagrams: RSS %+d KiB, held %d octets (%d datagrams), reorder store full %d, peers %d",
		socks*perSock, grown>>10, cs["rd_held_bytes"], cs["rd_held_now"], cs["rd_reorder_full"], cs["rd_peers"])
	if cs["rd_held_bytes"] > 8<<20 {
		t.Errorf("reorder store holds %d octets, want ≤ 8 MiB (-rd-reorder-qp-bytes)", cs["rd_held_bytes"])
	}
	if cs["rd_held_now"] == 0 || cs["rd_reorder_full"] == 0 {
		t.Errorf("the proven flood was neither held nor refused: %v", cs)
	}
	if grown > rssSlack {
		t.Errorf("daemon RSS grew by %d MiB, want ≤ %d MiB", grown>>20, rssSlack>>20)
	}
}

// Issue 13 point 12: a peer that died does not hold back the Sends to
// other peers on the same QP, nor their completions.
func TestRDDeadPeerOthersComplete(t *testing.T) {
	d := daemontest.Start(t, "rd-dead", daemontest.Options{Ports: nextPorts(),
		Extra: []string{"-rd-ports", nextRDPorts(), "-rd-max-retries", "1000", "-rd-rto-max", "200ms"}})
	a := newRDQP(t, "a", d.Open(t, "a"), 32*65536)
	live := newRDQP(t, "live", d.Open(t, "live"), 16*65536)
	deadCtx := d.Open(t, "dead")
	dead := newRDQP(t, "dead", deadCtx, 65536)
	ahDead, err := a.pd.CreateAHTo(dead.qp.Endpoint())
	if err != nil {
		t.Fatal(err)
	}
	deadCtx.Close() // its QP and socket go away
	// 1 MiB to the dead peer (more datagrams than a first flight).
	if n, err := a.qp.PostSend([]ofverbs.SendWR{{ID: 1 << 40, Opcode: ofverbs.WRSend, AH: ahDead, Signaled: true,
		SGL: []ofverbs.SGE{a.mr.SGE(a.mem[:1<<20])}}}); n != 1 {
		t.Fatalf("post to the dead peer: %v", err)
	}
	// 200 messages through a 64-entry SQ to the live peer, every octet
	// checked, completions in order (the dead peer's never among them).
	if err := rdFlow(a, live, 200, 8192); err != nil {
		t.Fatalf("Sends to a live peer beside a dead one: %v", err)
	}
}
