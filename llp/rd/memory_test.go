package rd

import (
	"net/netip"
	"runtime"
	"testing"

	"github.com/iwarpd/iwarpd/llp/dgram"
)

// TestIdlePeerMemory measures the heap cost of 1,000 idle peers, each of
// which has sent us one DATA datagram and been sent one (acknowledged both
// ways), and asserts a generous bound. An RC connection costs far more (a
// TCP socket with its buffers, MPA and DDP state: tens of KiB), so the
// issue's ≤ 1/20 target leaves ~1 KiB per peer; we assert 512 bytes.
func TestIdlePeerMemory(t *testing.T) {
	const peers = 1000
	cfg := DefaultConfig()
	e := NewEndpoint(cfg, incA)
	addrs := make([]netip.AddrPort, peers)
	for i := range addrs {
		addrs[i] = netip.AddrPortFrom(netip.AddrFrom4([4]byte{10, 1, byte(i >> 8), byte(i)}), 4791)
	}
	var out []Action
	measure := func() uint64 {
		runtime.GC()
		runtime.GC()
		var ms runtime.MemStats
		runtime.ReadMemStats(&ms)
		return ms.HeapAlloc
	}
	before := measure()
	now := t0
	for _, a := range addrs {
		d := dgram.RDHeader{Version: 1, Type: dgram.RDData, Incarnation: incB, Seq: 1, CumAck: e.Cookie(a)}
		if v := e.Receive(now, a, d, true); v != Deliver {
			t.Fatal(v)
		}
		if _, err := e.Send(now, a, 1); err != nil {
			t.Fatal(err)
		}
		e.Receive(now, a, dgram.RDHeader{Version: 1, Type: dgram.RDAck, Flags: dgram.FlagAck, Window: 256,
			Incarnation: incB, EchoedIncarnation: incA, CumAck: 2}, true)
	}
	// One idle sweep later (well before IdleTimeout reclaims them).
	now = now.Add(cfg.IdleTimeout / 2)
	out = e.Poll(now, out[:0])
	if e.Peers() != peers || len(e.active) != 0 {
		t.Fatalf("peers %d, active %d", e.Peers(), len(e.active))
	}
	nActions := len(out)
	out = nil
	e.active = nil // the endpoint's active list keeps its capacity: not per-peer state
	after := measure()
	per := float64(after-before) / peers
	t.Logf("idle peer: %.0f bytes on the heap (struct %d bytes + map entry); %d actions", per, PeerStateBytes, nActions)
	if per > 512 {
		t.Errorf("%.0f bytes per idle peer, want ≤ 512", per)
	}
	runtime.KeepAlive(e)
	runtime.KeepAlive(out)
}

// The per-peer struct stays small.
func TestPeerStructSize(t *testing.T) {
	t.Logf("peer struct %d bytes, outSeg %d bytes", PeerStateBytes, 32)
	if PeerStateBytes > 256 {
		t.Errorf("peer struct %d bytes, want ≤ 256", PeerStateBytes)
	}
}
