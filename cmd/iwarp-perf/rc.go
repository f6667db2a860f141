package main

import (
	"net/netip"
	"sync/atomic"
	"unsafe"

	"github.com/iwarpd/iwarpd/ofverbs"
)

// RC queue pairs (-t rc): connection with the rdma_cm-style verbs of
// ofverbs (the server listens on an ephemeral port of its daemon and
// announces it in its hello; the client connects), and the memory the RDMA
// operations use. The test loops are in rdma.go.

// rcReadDepth is the IRD and ORD both sides ask for (the daemon's maximum,
// as siw's); the depth in force is what the MPA exchange settled.
const rcReadDepth = 128

// defaultReadDepth is the depth assumed when the connection reports none
// (MPA Rev 1 has no IRD/ORD exchange).
const defaultReadDepth = 16

// poison fills the RDMA region before each size: 0xFF is never a pattern
// octet (those are 0..250), so a last octet polled for the expected value
// cannot match what an earlier size left behind.
const poison = 0xFF

// rdmaTransport is a transport whose peer accesses its memory with RDMA.
type rdmaTransport interface {
	// localBuffer is what this side exposes (nil: nothing).
	localBuffer() *remoteBuffer
	// setPeerBuffer records what the peer exposes (nil: nothing).
	setPeerBuffer(b *remoteBuffer)
}

// rdmaRecvSlots returns the receive slots of an RDMA Write, Read or
// Write-Record test: write bw carries its markers and credits as 8-octet
// Sends; each Write-Record consumes a receive at its target for its record
// (64 octets hold 7 ranges; a whole message has one), and write-record bw
// credits with Sends as send bw does; read receives nothing.
func rdmaRecvSlots(cfg *config, server bool) (slots, size int) {
	switch {
	case (cfg.op == "write-imm" && cfg.qpType == "rc") || cfg.op == "send-fetchadd":
		return 4, 64 // one Immediate Data / one request or reply at a time
	case cfg.op == "write" && cfg.test == "bw":
		return creditSlots, 64
	case wrecTest(cfg.op, cfg.qpType) && cfg.test == "lat":
		return 4, 64
	case wrecTest(cfg.op, cfg.qpType) && server:
		return cfg.window, 64
	case wrecTest(cfg.op, cfg.qpType):
		return creditSlots, 64
	}
	return 0, 0
}

// rdmaRegion returns the slots of the RDMA region and their stride (the
// largest message rounded up to 64 octets, so every slot is aligned; both
// sides compute the same, and a writer addresses the peer's slots with it):
//   - write and write-record lat: 2 slots on both sides, written by the
//     peer in turn;
//   - write and write-record bw: the server's ring of -window slots,
//     written by the client;
//   - read: where the client's Reads land, 2 slots (lat) or one per Read
//     outstanding (bw); the server exposes its pattern buffer instead.
func rdmaRegion(cfg *config, largest int, server bool) (slots, stride int) {
	stride = (largest + 63) &^ 63
	write := cfg.op == "write" || cfg.op == "write-record" || cfg.op == "write-imm"
	switch {
	case atomicOp(cfg.op) && server:
		return 1, 64 // the target word (0)
	case atomicOp(cfg.op):
		return min(max(cfg.window, 2), rcReadDepth), atomicSize // one result word per atomic outstanding
	case write && cfg.test == "lat":
		return 2, stride
	case write && server:
		return cfg.window, stride
	case cfg.op == "read" && !server && cfg.test == "lat":
		return 2, stride
	case cfg.op == "read" && !server:
		return min(cfg.window, rcReadDepth), stride
	}
	return 0, stride // the stride of the peer's slots all the same
}

// allocRegion allocates and registers the RDMA region, if the test has one.
func (t *verbsTransport) allocRegion() error {
	if t.regionSlots == 0 {
		return nil
	}
	buf, err := allocData(t.mem, t.ctx, t.regionSlots*t.stride)
	if err != nil {
		return t.errorf("RDMA region: %w", err)
	}
	t.region = buf
	if uintptr(unsafe.Pointer(&t.region[0]))%4 != 0 {
		return t.errorf("RDMA region not aligned")
	}
	access := ofverbs.AccessLocalWrite
	if t.op == "write" || t.op == "write-record" || t.op == "write-imm" {
		access |= ofverbs.AccessRemoteWrite
	}
	if atomicOp(t.op) {
		access |= ofverbs.AccessRemoteAtomic
	}
	if t.regionMR, err = t.pd.RegMR(t.region, access); err != nil {
		return t.errorf("registering the RDMA region: %w", err)
	}
	return nil
}

func (t *verbsTransport) regionSlot(i int) []byte { return t.region[i*t.stride : (i+1)*t.stride] }

func (t *verbsTransport) poisonRegion() {
	if atomicOp(t.op) {
		clear(t.region) // the counter starts at 0 (atomic k returns k)
		return
	}
	for i := range t.region {
		t.region[i] = poison
	}
}

func (t *verbsTransport) localBuffer() *remoteBuffer {
	switch {
	case (t.op == "write" || t.op == "write-record" || t.op == "write-imm" || atomicOp(t.op)) && t.regionMR != nil:
		return &remoteBuffer{Addr: t.regionMR.Addr(), RKey: t.regionMR.RKey(), Len: uint64(len(t.region))}
	case t.op == "read" && t.regionMR == nil: // the server: Reads come from its pattern
		return &remoteBuffer{Addr: t.patMR.Addr(), RKey: t.patMR.RKey(), Len: uint64(len(t.pat))}
	}
	return nil
}

func (t *verbsTransport) setPeerBuffer(b *remoteBuffer) { t.peerBuf = b }

// peerRange returns the peer's address of [off, off+n) of its buffer.
func (t *verbsTransport) peerRange(off, n int) (uint64, error) {
	b := t.peerBuf
	if b == nil {
		return 0, t.errorf("the peer exposed no buffer for -o %s", t.op)
	}
	if off < 0 || n < 0 || uint64(off)+uint64(n) > b.Len {
		return 0, t.errorf("octets [%d, %d) lie outside the peer's %d-octet buffer", off, off+n, b.Len)
	}
	return b.Addr + uint64(off), nil
}

// listen makes the server's daemon listen on an ephemeral port.
func (t *verbsTransport) listen() error {
	l, err := t.ctx.Listen(":0")
	if err != nil {
		return t.errorf("listen: %w", err)
	}
	t.lst = l
	return nil
}

// rcLocalAddr is the server's listener (on the out-of-band address when
// the daemon listens on every address); "" on the client.
func (t *verbsTransport) rcLocalAddr() string {
	if t.lst == nil {
		return ""
	}
	a := t.lst.Addr()
	if a.Addr().IsUnspecified() && t.oobIP.IsValid() {
		a = netip.AddrPortFrom(t.oobIP, a.Port())
	}
	return a.String()
}

// rcConnect accepts the client's connection (server) or connects to the
// server's listener (client); the QP is in RTS afterwards.
func (t *verbsTransport) rcConnect(peer string, server bool) error {
	p := ofverbs.ConnParam{IRD: rcReadDepth, ORD: rcReadDepth}
	if server {
		if t.lst == nil {
			return t.errorf("internal error: no listener")
		}
		req, err := t.lst.GetRequest(t.w.timeout)
		if err != nil {
			return t.errorf("waiting for the client's connection: %w", err)
		}
		if err := req.Accept(t.qp, p); err != nil {
			return t.errorf("accepting %v: %w", req.Peer(), err)
		}
		t.lst.Close()
		t.lst = nil
	} else {
		ap, err := netip.ParseAddrPort(peer)
		if err != nil {
			return t.errorf("server address %q: %w", peer, err)
		}
		p.Timeout = t.w.timeout
		if err := t.qp.Connect(ap, p); err != nil {
			return t.errorf("connecting to %v: %w", ap, err)
		}
	}
	t.ord = int(t.qp.ConnInfo().ORD)
	if t.ord == 0 {
		t.ord = defaultReadDepth
	}
	return nil
}

// loadByte reads octet i of b, which the daemon may be writing, with an
// atomic load of its aligned 4-octet word (b starts 4-aligned and the word
// lies inside the slot, whose stride is a multiple of 64).
func loadByte(b []byte, i int) byte {
	var word [4]byte
	*(*uint32)(unsafe.Pointer(&word)) = atomic.LoadUint32((*uint32)(unsafe.Pointer(&b[i&^3])))
	return word[i&3]
}

var _ rdmaTransport = (*verbsTransport)(nil)
