package rd

import (
	"fmt"
	"math/bits"
	"net/netip"
	"testing"
	"time"

	"github.com/iwarpd/iwarpd/llp/dgram"
)

// check verifies the invariants of e's state.
func (e *Endpoint) check() error {
	if len(e.peers) > e.cfg.MaxPeers {
		return fmt.Errorf("%d peers > MaxPeers", len(e.peers))
	}
	for addr, p := range e.peers {
		if p.addr != addr {
			return fmt.Errorf("peer %v filed under %v", p.addr, addr)
		}
		if int(p.nextSeq-p.sndUna) != p.out.n {
			return fmt.Errorf("%v: nextSeq %d sndUna %d but %d outstanding", addr, p.nextSeq, p.sndUna, p.out.n)
		}
		if p.out.n > e.cfg.Window {
			return fmt.Errorf("%v: %d outstanding > window", addr, p.out.n)
		}
		if p.busy() && !p.active {
			return fmt.Errorf("%v: busy but not active", addr)
		}
		n := 0
		for _, w := range p.held {
			n += bits.OnesCount64(w)
		}
		if n != int(p.heldN) || n > e.cfg.ReorderLimit {
			return fmt.Errorf("%v: heldN %d, bitmap %d", addr, p.heldN, n)
		}
		if n > 0 && (p.rcvNext == 0 || p.isHeld(p.rcvNext)) {
			return fmt.Errorf("%v: held with rcvNext %d", addr, p.rcvNext)
		}
	}
	return nil
}

// FuzzEndpointReceive feeds arbitrary headers from arbitrary peers,
// interleaved with sends and polls, and checks that nothing panics, the
// state stays consistent and every token ends at most once.
func FuzzEndpointReceive(f *testing.F) {
	var h dgram.RDHeader
	seed := func(ops ...[]byte) []byte {
		var b []byte
		for _, o := range ops {
			b = append(b, o...)
		}
		return b
	}
	op := func(kind, peer, ready, dt byte, hd dgram.RDHeader) []byte {
		return hd.Append([]byte{kind, peer, ready, dt})
	}
	h = dgram.RDHeader{Version: 1, Type: dgram.RDData, Incarnation: incB, Seq: 1}
	h2 := h
	h2.Seq = 3
	a := dgram.RDHeader{Version: 1, Type: dgram.RDAck, Flags: dgram.FlagAck, Window: 4, Incarnation: incB, EchoedIncarnation: incA, CumAck: 2, SACK: 1}
	r := dgram.RDHeader{Version: 1, Type: dgram.RDAck, Flags: dgram.FlagReset, Incarnation: incB, EchoedIncarnation: incA}
	nr := a
	nr.Flags |= dgram.FlagNotReady
	f.Add(seed(op(0, 0, 1, 1, h), op(0, 0, 1, 1, h2), op(1, 0, 0, 5, h), op(1, 0, 0, 5, h), op(0, 0, 1, 2, a), op(2, 0, 0, 200, h)))
	f.Add(seed(op(1, 1, 0, 0, h), op(1, 1, 0, 0, h), op(0, 1, 0, 0, nr), op(2, 0, 0, 255, h), op(0, 1, 1, 3, r), op(0, 2, 1, 3, h)))
	f.Add(seed(op(0, 3, 0, 9, h2), op(0, 3, 1, 9, h), op(2, 3, 0, 90, h)))
	f.Fuzz(runEndpointOps)
}

var fuzzAddrs = []netip.AddrPort{addrA, addrB, netip.MustParseAddrPort("[fe80::1]:9"), netip.MustParseAddrPort("10.0.0.3:1")}

// runEndpointOps interprets b as operations of 28 octets: kind (receive,
// send, poll), peer, ready, time step (×100µs), RD header.
func runEndpointOps(t *testing.T, b []byte) {
	addrs := fuzzAddrs
	if len(b) > 28*512 {
		b = b[:28*512] // bounded work per input
	}
	{
		cfg := DefaultConfig()
		cfg.Window = 8
		cfg.MaxRetries = 3
		cfg.MaxPeers = 3
		cfg.IdleTimeout = 100 * time.Millisecond
		e := NewEndpoint(cfg, incA)
		now := t0
		var tok Token
		ended := map[Token]ActionKind{}
		var out []Action
		const opLen = 4 + dgram.RDHeaderLen
		for len(b) >= opLen {
			kind, peer, ready, dt := b[0], addrs[int(b[1])%len(addrs)], b[2]&1 != 0, b[3]
			hd, _, _ := dgram.ParseRDHeader(b[4:opLen]) // invalid headers go in as decoded
			b = b[opLen:]
			now = now.Add(time.Duration(dt) * 100 * time.Microsecond)
			switch kind % 3 {
			case 0:
				e.Receive(now, peer, hd, ready)
			case 1:
				if e.CanSend(peer) {
					tok++
					if _, err := e.Send(now, peer, tok); err != nil {
						t.Fatalf("Send after CanSend: %v", err)
					}
				}
			case 2:
				out = e.Poll(now, out[:0])
				for _, a := range out {
					switch a.Kind {
					case Acked, Failed, PeerReset:
						if k, ok := ended[a.Token]; ok {
							t.Fatalf("token %d ended twice: %v then %v", a.Token, k, a.Kind)
						}
						if a.Token == 0 || a.Token > tok {
							t.Fatalf("%v for unknown token %d", a.Kind, a.Token)
						}
						ended[a.Token] = a.Kind
					}
				}
			}
			if err := e.check(); err != nil {
				t.Fatal(err)
			}
			if d, ok := e.NextDeadline(); ok && d.Before(t0) {
				t.Fatalf("deadline %v before the start", d)
			}
		}
	}
}
