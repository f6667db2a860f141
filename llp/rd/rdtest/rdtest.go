package rdtest

import (
	"container/heap"
	"fmt"
	"math/rand/v2"
	"net/netip"
	"time"

	"github.com/iwarpd/iwarpd/llp/dgram"
	"github.com/iwarpd/iwarpd/llp/rd"
)

// LinkConfig describes the simulated link (the same for every pair).
type LinkConfig struct {
	Loss         float64       // probability a datagram is lost
	Duplicate    float64       // probability a datagram arrives twice
	Reorder      float64       // probability a datagram takes ReorderDelay extra
	Delay        time.Duration // one-way delay
	Jitter       time.Duration // uniform extra delay in [0, Jitter)
	ReorderDelay time.Duration // extra delay of reordered datagrams (0: 4×Delay + 100µs)
	Down         bool          // drop everything
	// Fragments is the number of wire packets of a DATA datagram (0: 1),
	// each lost with probability Loss: a 4 KiB datagram over a 1500-octet
	// MTU is three IP fragments and is lost when any of them is, so at 20 %
	// packet loss 49 % of the DATA and 20 % of the ACKs are lost (the
	// veth loss runs of iwarp-bench, docs/benchmarks.md).
	Fragments int
}

// Event is a completion seen by a node's engine.
type Event struct {
	Time  time.Time
	Kind  rd.ActionKind // Acked, Failed or PeerReset
	Peer  netip.AddrPort
	Token rd.Token
	Life  int // the node's Lives when it happened
}

type pairKey struct{ from, to netip.AddrPort }

type heldKey struct {
	from netip.AddrPort
	seq  uint32
}

type datagram struct {
	at       time.Time
	order    uint64
	from, to netip.AddrPort
	wire     []byte // the RD header as sent
	tok      rd.Token
}

type flight []*datagram

func (f flight) Len() int { return len(f) }
func (f flight) Less(i, j int) bool {
	if !f[i].at.Equal(f[j].at) {
		return f[i].at.Before(f[j].at)
	}
	return f[i].order < f[j].order
}
func (f flight) Swap(i, j int) { f[i], f[j] = f[j], f[i] }
func (f *flight) Push(x any)   { *f = append(*f, x.(*datagram)) }
func (f *flight) Pop() any {
	old := *f
	x := old[len(old)-1]
	old[len(old)-1] = nil
	*f = old[:len(old)-1]
	return x
}

// Net is the simulated network and its virtual clock.
type Net struct {
	Now        time.Time
	Link       LinkConfig
	Violations []string
	Sent, Lost uint64 // datagrams put on the link, datagrams lost
	LostData   uint64 // DATA datagrams lost (new or retransmitted)
	// Trace, when set, sees every datagram received (with its verdict) or
	// lost (verdict 255): for debugging a failing seed.
	Trace func(from, to netip.AddrPort, h dgram.RDHeader, v rd.Verdict)

	rng       *rand.Rand
	nodes     map[netip.AddrPort]*Node
	list      []*Node
	flight    flight
	order     uint64
	delivered map[pairKey]map[rd.Token]bool // to the receiver's current life
	ever      map[pairKey]map[rd.Token]bool // to any life of the receiver
	last      map[pairKey]rd.Token
	actions   []rd.Action
}

// NewNet returns an empty network whose clock starts at a fixed time.
func NewNet(link LinkConfig, seed uint64) *Net {
	return &Net{
		Now:       time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC),
		Link:      link,
		rng:       rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15)),
		nodes:     make(map[netip.AddrPort]*Node),
		delivered: make(map[pairKey]map[rd.Token]bool),
		ever:      make(map[pairKey]map[rd.Token]bool),
		last:      make(map[pairKey]rd.Token),
	}
}

// Node is one RD QP on the Net with a minimal engine around its Endpoint.
type Node struct {
	Addr netip.AddrPort
	EP   *rd.Endpoint
	// Ready says whether the node could accept a DATA datagram at now
	// (nil: always).
	Ready func(now time.Time) bool
	// Delivered lists, per source, the tokens delivered in order.
	Delivered map[netip.AddrPort][]rd.Token
	Events    []Event
	Verdicts  map[rd.Verdict]int
	Lives     int // restarts so far
	// Window, when > 0, is the most tokens the node has sent and not yet
	// ended: an application with that many work requests outstanding,
	// which completes them in order (iwarp-perf -window).
	Window int
	// Log, when set, sees every action of the node's Endpoint as Poll
	// returned it (rd.Config.AckedRuns: one Acked for a run of tokens).
	Log func(now time.Time, a *rd.Action)

	outstanding int // tokens of this life sent and not yet ended

	net   *Net
	cfg   rd.Config
	queue map[netip.AddrPort][]rd.Token
	dests []netip.AddrPort
	held  map[heldKey]rd.Token
}

// AddNode adds a node with a new Endpoint at the next address.
func (n *Net) AddNode(cfg rd.Config, incarnation uint32) *Node {
	addr := netip.AddrPortFrom(netip.AddrFrom4([4]byte{10, 0, byte(len(n.list) >> 8), byte(len(n.list) + 1)}), 4791)
	nd := &Node{Addr: addr, net: n, cfg: cfg}
	nd.reset(incarnation)
	n.nodes[addr] = nd
	n.list = append(n.list, nd)
	return nd
}

func (nd *Node) reset(incarnation uint32) {
	nd.EP = rd.NewEndpoint(nd.cfg, incarnation)
	nd.queue = make(map[netip.AddrPort][]rd.Token)
	nd.dests = nil
	nd.held = make(map[heldKey]rd.Token)
	nd.outstanding = 0
	nd.Delivered = make(map[netip.AddrPort][]rd.Token)
	nd.Verdicts = make(map[rd.Verdict]int)
}

// Restart gives the node a new life: a new Endpoint with incarnation, an
// empty send queue and no held datagrams (Events are kept; Lives counts
// the restarts).
//
// Delivery is checked per life of the receiver: a token may be delivered
// once to each life (an old life may have taken it without acknowledging
// it), never twice to the same life, and in order within a life. An Acked
// token must have been delivered to some life of the receiver.
func (nd *Node) Restart(incarnation uint32) {
	nd.reset(incarnation)
	nd.Lives++
	n := nd.net
	for k := range n.delivered {
		if k.from == nd.Addr || k.to == nd.Addr {
			delete(n.delivered, k) // its new life names its tokens afresh / receives afresh
		}
	}
	for k := range n.ever {
		if k.from == nd.Addr {
			delete(n.ever, k)
		}
	}
	for k := range n.last {
		if k.from == nd.Addr || k.to == nd.Addr {
			delete(n.last, k)
		}
	}
}

// DeliveredEver reports whether tok from src was ever delivered to dst (any
// life of dst).
func (n *Net) DeliveredEver(src, dst *Node, tok rd.Token) bool {
	return n.ever[pairKey{src.Addr, dst.Addr}][tok]
}

// Queue appends tokens to send to dst (increasing per destination).
func (nd *Node) Queue(dst *Node, toks ...rd.Token) {
	if _, ok := nd.queue[dst.Addr]; !ok {
		nd.dests = append(nd.dests, dst.Addr)
	}
	nd.queue[dst.Addr] = append(nd.queue[dst.Addr], toks...)
}

// Queued returns the number of tokens not yet sent.
func (nd *Node) Queued() int {
	c := 0
	for _, q := range nd.queue {
		c += len(q)
	}
	return c
}

// Outstanding returns the number of tokens the node's current life sent
// that have not ended yet (Acked, Failed or PeerReset).
func (nd *Node) Outstanding() int { return nd.outstanding }

// Count returns how many events of kind the node has seen.
func (nd *Node) Count(kind rd.ActionKind) int {
	c := 0
	for _, ev := range nd.Events {
		if ev.Kind == kind {
			c++
		}
	}
	return c
}

func (n *Net) violate(format string, args ...any) {
	if len(n.Violations) < 100 {
		n.Violations = append(n.Violations, fmt.Sprintf("%v: ", n.Now.Format("15:04:05.000000"))+fmt.Sprintf(format, args...))
	}
}

// transmit puts a datagram on the link.
func (n *Net) transmit(from, to netip.AddrPort, h dgram.RDHeader, tok rd.Token) {
	n.Sent++
	lost := n.Link.Down
	packets := 1
	if h.Type == dgram.RDData && n.Link.Fragments > 1 {
		packets = n.Link.Fragments
	}
	for range packets {
		if n.rng.Float64() < n.Link.Loss {
			lost = true
		}
	}
	if lost {
		if n.Trace != nil {
			n.Trace(from, to, h, rd.Verdict(255))
		}
		n.Lost++
		if h.Type == dgram.RDData {
			n.LostData++
		}
		return
	}
	copies := 1
	if n.rng.Float64() < n.Link.Duplicate {
		copies = 2
	}
	wire := h.Append(nil)
	for range copies {
		d := n.Link.Delay
		if n.Link.Jitter > 0 {
			d += time.Duration(n.rng.Int64N(int64(n.Link.Jitter)))
		}
		if n.rng.Float64() < n.Link.Reorder {
			rd := n.Link.ReorderDelay
			if rd == 0 {
				rd = 4*n.Link.Delay + 100*time.Microsecond
			}
			d += rd
		}
		n.order++
		heap.Push(&n.flight, &datagram{at: n.Now.Add(d), order: n.order, from: from, to: to, wire: wire, tok: tok})
	}
}

// pump sends queued tokens while the windows allow, then polls.
func (nd *Node) pump() {
	for _, dst := range nd.dests {
		q := nd.queue[dst]
		for len(q) > 0 && nd.EP.CanSend(dst) && (nd.Window <= 0 || nd.outstanding < nd.Window) {
			h, err := nd.EP.Send(nd.net.Now, dst, q[0])
			if err != nil {
				nd.net.violate("%v: send: %v", nd.Addr, err)
				break
			}
			nd.net.transmit(nd.Addr, dst, h, q[0])
			nd.outstanding++
			q = q[1:]
		}
		nd.queue[dst] = q
	}
	nd.poll()
}

func (nd *Node) poll() {
	n := nd.net
	n.actions = nd.EP.Poll(n.Now, n.actions[:0])
	for i := range n.actions {
		a := &n.actions[i]
		if nd.Log != nil {
			nd.Log(n.Now, a)
		}
		switch a.Kind {
		case rd.Retransmit:
			n.transmit(nd.Addr, a.Peer, a.Header, a.Token)
		case rd.SendAck:
			n.transmit(nd.Addr, a.Peer, a.Header, 0)
		case rd.Acked:
			k := pairKey{nd.Addr, a.Peer}
			for j := range max(a.N, 1) { // rd.Config.AckedRuns: Token to Token+N-1
				tok := a.Token + rd.Token(j)
				if !n.ever[k][tok] {
					n.violate("%v→%v: token %d acked but never delivered", nd.Addr, a.Peer, tok)
				}
				nd.Events = append(nd.Events, Event{n.Now, a.Kind, a.Peer, tok, nd.Lives})
				nd.outstanding--
			}
		case rd.Failed, rd.PeerReset:
			nd.Events = append(nd.Events, Event{n.Now, a.Kind, a.Peer, a.Token, nd.Lives})
			nd.outstanding--
		case rd.DeliverHeld:
			hk := heldKey{a.Peer, a.Header.Seq}
			tok, ok := nd.held[hk]
			if !ok {
				n.violate("%v: DeliverHeld %v seq %d: not held", nd.Addr, a.Peer, a.Header.Seq)
				continue
			}
			delete(nd.held, hk)
			nd.deliver(a.Peer, tok)
		case rd.DiscardHeld:
			for k := range nd.held {
				if k.from == a.Peer {
					delete(nd.held, k)
				}
			}
		default:
			n.violate("%v: unknown action %v", nd.Addr, a.Kind)
		}
	}
}

func (nd *Node) deliver(from netip.AddrPort, tok rd.Token) {
	n := nd.net
	k := pairKey{from, nd.Addr}
	m := n.delivered[k]
	if m == nil {
		m = make(map[rd.Token]bool)
		n.delivered[k] = m
	}
	if m[tok] {
		n.violate("%v→%v: token %d delivered twice to the same life", from, nd.Addr, tok)
	}
	if last, ok := n.last[k]; ok && tok <= last {
		n.violate("%v→%v: token %d delivered after %d", from, nd.Addr, tok, last)
	}
	m[tok] = true
	if n.ever[k] == nil {
		n.ever[k] = make(map[rd.Token]bool)
	}
	n.ever[k][tok] = true
	n.last[k] = tok
	nd.Delivered[from] = append(nd.Delivered[from], tok)
}

func (nd *Node) receive(d *datagram) {
	h, _, err := dgram.ParseRDHeader(d.wire)
	if err != nil {
		nd.net.violate("%v: parse: %v", nd.Addr, err)
		return
	}
	ready := nd.Ready == nil || nd.Ready(nd.net.Now)
	v := nd.EP.Receive(nd.net.Now, d.from, h, ready)
	if nd.net.Trace != nil {
		nd.net.Trace(d.from, nd.Addr, h, v)
	}
	nd.Verdicts[v]++
	switch v {
	case rd.Deliver:
		nd.deliver(d.from, d.tok)
	case rd.Hold:
		nd.held[heldKey{d.from, h.Seq}] = d.tok
	}
}

// Step advances the clock to the next event (arrival or timer), handles
// it and returns true; false when nothing is left to happen.
func (n *Net) Step() bool {
	for _, nd := range n.list {
		nd.pump()
	}
	var next time.Time
	ok := false
	if len(n.flight) > 0 {
		next, ok = n.flight[0].at, true
	}
	for _, nd := range n.list {
		if t, has := nd.EP.NextDeadline(); has && (!ok || t.Before(next)) {
			next, ok = t, true
		}
	}
	if !ok {
		return false
	}
	if next.After(n.Now) {
		n.Now = next
	}
	for len(n.flight) > 0 && !n.flight[0].at.After(n.Now) {
		d := heap.Pop(&n.flight).(*datagram)
		if nd := n.nodes[d.to]; nd != nil {
			nd.receive(d)
		}
	}
	for _, nd := range n.list {
		nd.poll()
	}
	return true
}

// Run steps until done returns true (then true), or the clock passes
// until, or nothing is left to happen (then false). maxSteps bounds the
// loop.
func (n *Net) Run(until time.Time, maxSteps int, done func() bool) bool {
	for i := 0; i < maxSteps; i++ {
		if done != nil && done() {
			return true
		}
		if n.Now.After(until) || !n.Step() {
			return done != nil && done()
		}
	}
	return done != nil && done()
}

// Nodes returns the nodes in the order they were added.
func (n *Net) Nodes() []*Node { return n.list }
