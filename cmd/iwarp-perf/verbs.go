package main

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net/netip"
	"time"

	"github.com/iwarpd/iwarpd/ofverbs"
	"golang.org/x/sys/unix"
)

// verbsTransport runs the test on an iwarpd UD, RC or RD queue pair through ofverbs:
// one QP with its own send and receive CQs sharing a completion channel;
// data sent straight from a registered pattern buffer; receives into
// registered slots of the largest message, re-posted as soon as a message
// is checked; completions waited for with the poll-then-block discipline
// (poll the CQ, sched_yield, then ReqNotify and block on the channel).
type verbsTransport struct {
	mem            string // -mem: where data buffers live (allocData)
	ctx            *ofverbs.Context
	ownsCtx        bool // close ends the session (false for one of -qps N)
	pd             *ofverbs.PD
	ch             *ofverbs.CompChannel
	sendCQ, recvCQ *ofverbs.CQ
	qp             *ofverbs.QP
	ah             *ofverbs.AH
	w              waiter
	kind           string // "ud", "rc" or "rd"
	op             string // -o

	// RC only (rc.go): the server's CM listener, the RDMA region (the
	// target of the peer's Writes, or where Reads land), the peer's
	// exposed buffer and the outbound Read depth in force.
	oobIP       netip.Addr
	lst         *ofverbs.Listener
	region      []byte
	regionMR    *ofverbs.MR
	regionSlots int
	stride      int
	peerBuf     *remoteBuffer
	ord         int
	outOfOrder  int // Read completions seen out of order (readBW)

	pat   pattern // the pattern buffer's bytes
	patMR *ofverbs.MR

	slots    int // receive slots, each slotSize bytes
	slotSize int
	slotBuf  []byte
	slotMR   *ofverbs.MR
	posted   bool

	sqDepth     int // most signaled sends outstanding
	outstanding int

	// scratch, so that the data path does not allocate
	swr      []ofverbs.SendWR
	sges     []ofverbs.SGE
	rwr      [1]ofverbs.RecvWR
	rsge     [1]ofverbs.SGE
	swcs     [32]ofverbs.WC
	rwcs     [32]ofverbs.WC
	rpos, rn int        // rwcs[rpos:rn] are receive completions not yet consumed
	held     int        // slot returned by recv, -1 if none
	heldWC   ofverbs.WC // the completion of the held slot
	cbuf     [8]byte
}

// creditSlots is how many 64-byte receive slots a bw sender posts for
// credit messages (at most a few are ever in flight).
const creditSlots = 16

func nextPow2(n int) int {
	p := 1
	for p < n {
		p *= 2
	}
	return p
}

// verbsShared is what the queue pairs of one test share: the session with
// the local iwarpd, its device attributes, one protection domain and the
// registered pattern buffer every send reads from.
type verbsShared struct {
	ctx     *ofverbs.Context
	attr    ofverbs.DeviceAttr
	pd      *ofverbs.PD
	pat     pattern
	patMR   *ofverbs.MR
	largest int // the largest message of the test
}

// openVerbsTransport opens the local iwarpd (-socket) and sets up the QP
// (or, with -qps N, the N QPs: multiqp.go) and memory for the test cfg
// describes. It returns the largest message. ip is the local address of
// the out-of-band connection (an RC server announces its listener on it
// when the device address is unspecified).
func openVerbsTransport(cfg *config, ip netip.Addr, server bool) (tr transport, maxMsg int, err error) {
	opts := []ofverbs.Option{ofverbs.WithClientName("iwarp-perf")}
	if cfg.socket != "" {
		opts = append(opts, ofverbs.WithSocket(cfg.socket))
	}
	ctx, err := ofverbs.Open(opts...)
	if err != nil {
		return nil, 0, fmt.Errorf("%s: %w", cfg.qpType, err)
	}
	defer func() {
		if err != nil {
			ctx.Close()
		}
	}()
	errorf := func(format string, a ...any) error { return fmt.Errorf(cfg.qpType+": "+format, a...) }
	attr, err := ctx.QueryDevice()
	if err != nil {
		return nil, 0, errorf("%w", err)
	}
	maxMsg = attr.MaxMsgUD
	if cfg.qpType != "ud" { // rc, rd
		maxMsg = 1 << 20 // -a stops at 1 MiB, as raw TCP does (RD: -max-msg-rd, 64 MiB by default)
		if !cfg.all && cfg.size > maxMsg {
			maxMsg = min(cfg.size, maxTCPMessage)
		}
	}
	largest := cfg.size
	if cfg.all {
		largest = 1
		for largest*2 <= maxMsg {
			largest *= 2
		}
	} else if largest == 0 {
		largest = 64
		if cfg.test == "bw" {
			largest = min(65536, maxMsg)
		}
	}
	if largest > maxMsg {
		return nil, 0, usagef("-s %d: larger than the largest %s message, %d bytes", largest, cfg.qpType, maxMsg)
	}
	sh := &verbsShared{ctx: ctx, attr: attr, largest: largest}
	if sh.pd, err = ctx.AllocPD(); err != nil {
		return nil, 0, errorf("%w", err)
	}
	patBuf, err := allocData(cfg.mem, ctx, patternPeriod+largest)
	if err != nil {
		return nil, 0, errorf("pattern buffer: %w", err)
	}
	sh.pat = pattern(patBuf)
	copy(sh.pat, newPattern(largest))
	var patAccess ofverbs.Access
	if cfg.op == "read" {
		patAccess = ofverbs.AccessRemoteRead // the source of -o read
	}
	if sh.patMR, err = sh.pd.RegMR(sh.pat, patAccess); err != nil {
		return nil, 0, errorf("registering the pattern: %w", err)
	}
	if cfg.qps > 1 {
		m, err := newMultiQP(cfg, sh, ip, server)
		if err != nil {
			return nil, 0, err
		}
		return m, maxMsg, nil
	}
	t, err := newVerbsQP(cfg, sh, ip, server, 0)
	if err != nil {
		return nil, 0, err
	}
	t.ownsCtx = true
	return t, maxMsg, nil
}

// newVerbsQP creates one QP of the test, with its CQs, completion channel,
// receive slots and RDMA region, in the session sh. With -qps N, cfg is
// the configuration of one of the N (its -window is the QP's share) and
// index is which (QP index takes UDP port -qp-port + index).
func newVerbsQP(cfg *config, sh *verbsShared, ip netip.Addr, server bool, index int) (*verbsTransport, error) {
	t := &verbsTransport{ctx: sh.ctx, pd: sh.pd, pat: sh.pat, patMR: sh.patMR, kind: cfg.qpType, op: cfg.op,
		w: cfg.waiter(), held: -1, oobIP: ip, mem: cfg.mem}
	attr, largest := sh.attr, sh.largest

	// Receive slots: lat ping-pongs need a few; the bw receiver a window's
	// worth; the bw sender only receives credits. RDMA Write and Read move
	// data through the RDMA region instead (rc.go).
	t.slots, t.slotSize = 4, largest
	switch {
	case cfg.op == "send-imm" && cfg.test == "bw" && server && cfg.qpType == "rc":
		t.slots = 2 * cfg.window // the Send and its Immediate Data each take a receive
	case cfg.op == "send-imm" && cfg.test == "bw" && server:
		t.slots = cfg.window
	case cfg.op == "send-imm" && cfg.test == "bw":
		t.slots, t.slotSize = creditSlots, 64
	case cfg.op == "send-imm" && cfg.qpType == "rc":
		t.slots = 8
	case cfg.op == "send-imm":
	case cfg.op != "send":
		t.slots, t.slotSize = rdmaRecvSlots(cfg, server)
	case cfg.test == "bw" && server:
		t.slots = cfg.window
	case cfg.test == "bw":
		t.slots, t.slotSize = creditSlots, 64
	}
	t.regionSlots, t.stride = rdmaRegion(cfg, largest, server)
	batch := cfg.batch()
	t.sqDepth = nextPow2(max(2*batch, 8))
	rqDepth := nextPow2(max(t.slots, 1))
	if rqDepth > attr.MaxQPWR || t.sqDepth > attr.MaxQPWR || max(rqDepth, t.sqDepth) > attr.MaxCQE {
		return nil, usagef("-window %d: needs queues of %d entries, the daemon allows %d", cfg.window, max(rqDepth, t.sqDepth), min(attr.MaxQPWR, attr.MaxCQE))
	}
	qps := uint64(max(cfg.qps, 1))
	need := uint64(patternPeriod+largest) + qps*(uint64(t.slots)*uint64(t.slotSize)+uint64(t.regionSlots)*uint64(t.stride))
	if attr.MaxRegistered > 0 && need > attr.MaxRegistered {
		return nil, usagef("-window %d with %d-byte messages on %d QPs needs %d bytes of registered memory, the daemon allows %d per session",
			cfg.window, largest, qps, need, attr.MaxRegistered)
	}

	ctx := sh.ctx
	var err error
	if t.slots > 0 {
		slotBuf, err := allocData(cfg.mem, ctx, t.slots*t.slotSize)
		if err != nil {
			return nil, t.errorf("receive buffers: %w", err)
		}
		t.slotBuf = slotBuf
		if t.slotMR, err = t.pd.RegMR(t.slotBuf, ofverbs.AccessLocalWrite); err != nil {
			return nil, t.errorf("registering receive buffers: %w", err)
		}
	}
	if err := t.allocRegion(); err != nil {
		return nil, err
	}
	if t.ch, err = ctx.CreateCompChannel(); err != nil {
		return nil, t.errorf("%w", err)
	}
	if t.sendCQ, err = ctx.CreateCQ(t.sqDepth, t.ch); err != nil {
		return nil, t.errorf("send CQ: %w", err)
	}
	if t.recvCQ, err = ctx.CreateCQ(rqDepth, t.ch); err != nil {
		return nil, t.errorf("receive CQ: %w", err)
	}
	qpType := map[string]ofverbs.QPType{"ud": ofverbs.QPTypeUD, "rc": ofverbs.QPTypeRC, "rd": ofverbs.QPTypeRD}[t.kind]
	port := uint16(0)
	if cfg.qpPort != 0 {
		port = uint16(cfg.qpPort + index)
	}
	t.qp, err = t.pd.CreateQP(ofverbs.QPInitAttr{
		Type: qpType, SendCQ: t.sendCQ, RecvCQ: t.recvCQ, Port: port,
		Cap: ofverbs.QPCap{MaxSendWR: uint32(t.sqDepth), MaxRecvWR: uint32(rqDepth), MaxSendSGE: 1, MaxRecvSGE: 1,
			MaxInline: uint32(len(t.cbuf))},
	})
	if err != nil {
		return nil, t.errorf("create QP: %w", err)
	}
	if t.kind == "rc" {
		// RTS comes with the connection (connect); a server listens now so
		// that its hello can announce where.
		if err := t.qp.ModifyState(ofverbs.QPStateInit); err != nil {
			return nil, t.errorf("bringing the QP to INIT: %w", err)
		}
		if server {
			if err := t.listen(); err != nil {
				return nil, err
			}
		}
	} else if err := t.qp.ModifyState(ofverbs.QPStateInit, ofverbs.QPStateRTR, ofverbs.QPStateRTS); err != nil {
		return nil, t.errorf("bringing the QP to RTS: %w", err)
	}
	t.swr = make([]ofverbs.SendWR, batch)
	t.sges = make([]ofverbs.SGE, batch)
	for i := range t.swr {
		t.swr[i] = ofverbs.SendWR{Opcode: ofverbs.WRSend, SGL: t.sges[i : i+1], Signaled: true}
	}
	t.rwr[0].SGL = t.rsge[:]
	return t, nil
}

func (t *verbsTransport) errorf(format string, a ...any) error {
	return fmt.Errorf(t.kind+": "+format, a...)
}

func (t *verbsTransport) name() string { return t.kind }

func (t *verbsTransport) localAddr() string {
	if t.kind == "rc" {
		return t.rcLocalAddr()
	}
	return t.qp.Endpoint().String() // ip:port/qkey: the peer needs the Q_Key too
}

// close ends the session (and with it every object of the test) when this
// QP owns it; the QPs of -qps N share the session multiQP closes.
func (t *verbsTransport) close() error {
	if !t.ownsCtx {
		return nil
	}
	return t.ctx.Close()
}

func (t *verbsTransport) connect(peer string, server bool) error {
	if t.kind == "rc" {
		return t.rcConnect(peer, server)
	}
	// UD and RD: an address handle of the peer QP on every work request.
	// RD has no IRD/ORD exchange: the daemons' -rd-ord (16 by default)
	// bounds the Reads in flight, and iwarp-perf keeps that many outstanding.
	t.ord = defaultReadDepth
	ep, err := ofverbs.ParseEndpoint(peer)
	if err != nil {
		return t.errorf("peer QP endpoint %q: %w", peer, err)
	}
	if t.ah, err = t.pd.CreateAHTo(ep); err != nil {
		return t.errorf("address handle for %v: %w", ep, err)
	}
	for i := range t.swr {
		t.swr[i].AH = t.ah
	}
	return nil
}

func (t *verbsTransport) slot(i int) []byte { return t.slotBuf[i*t.slotSize : (i+1)*t.slotSize] }

func (t *verbsTransport) postSlot(i int) error {
	t.rwr[0].ID = uint64(i)
	t.rsge[0] = t.slotMR.SGE(t.slot(i))
	if _, err := t.qp.PostRecv(t.rwr[:]); err != nil {
		return t.errorf("post receive: %w", err)
	}
	return nil
}

// prepare posts every receive slot once; slots are re-posted as they are
// released, so later sizes find them posted. It also resets the RDMA
// region (rc.go) for the next size.
func (t *verbsTransport) prepare(int) error {
	t.poisonRegion()
	if t.posted {
		return nil
	}
	for i := range t.slots {
		if err := t.postSlot(i); err != nil {
			return err
		}
	}
	t.posted = true
	return nil
}

// block arms cq, gives a completion that slipped in before the arming one
// more chance (check), then sleeps on the completion channel for at most d.
// waiter.wait calls its try again after block returns, so check must not
// lose what it consumed (see latched).
func (t *verbsTransport) block(cq *ofverbs.CQ, check func() (bool, error), d time.Duration) error {
	if err := cq.ReqNotify(false); err != nil {
		return err
	}
	if ok, err := check(); ok || err != nil {
		return err
	}
	got, err := t.ch.GetEventTimeout(d)
	if errors.Is(err, unix.ETIMEDOUT) {
		return nil
	}
	if err != nil {
		return t.errorf("waiting for a completion: %w", err)
	}
	got.AckEvents(1)
	return nil
}

// reapSends polls the send CQ and counts finished sends; a failed send is
// an error.
func (t *verbsTransport) reapSends() (int, error) {
	n, err := t.sendCQ.Poll(t.swcs[:])
	if err != nil {
		return 0, t.errorf("poll send CQ: %w", err)
	}
	for i := range n {
		if err := t.swcs[i].Err(); err != nil {
			return n, t.errorf("send: %w", err)
		}
	}
	t.outstanding -= n
	return n, nil
}

// waitSendRoom waits until n more signaled sends fit in the send CQ.
func (t *verbsTransport) waitSendRoom(n int) error {
	if _, err := t.reapSends(); err != nil || t.outstanding+n <= t.sqDepth {
		return err
	}
	try := func() (bool, error) {
		_, err := t.reapSends()
		return t.outstanding+n <= t.sqDepth, err
	}
	return t.w.wait(try, func(d time.Duration) error { return t.block(t.sendCQ, try, d) })
}

func (t *verbsTransport) post(wrs []ofverbs.SendWR) error {
	for len(wrs) > 0 {
		if err := t.waitSendRoom(len(wrs)); err != nil {
			return err
		}
		k, err := t.qp.PostSend(wrs)
		t.outstanding += k
		wrs = wrs[k:]
		if err != nil && !errors.Is(err, unix.ENOMEM) {
			return t.errorf("post send: %w", err)
		}
		if err != nil { // send queue full: let the daemon catch up
			schedYield()
		}
	}
	return nil
}

func (t *verbsTransport) send(first uint64, n, size int) error {
	if wrecTest(t.op, t.kind) {
		return t.sendWriteRecords(first, n, size)
	}
	wrs := t.swr[:n]
	for i := range wrs {
		iter := first + uint64(i)
		wrs[i].ID = iter
		wrs[i].Opcode = ofverbs.WRSend
		wrs[i].Inline = false
		wrs[i].InlineData = nil
		wrs[i].SGL = t.sges[i : i+1]
		t.sges[i] = t.patMR.SGE(t.pat.message(iter, size))
		if t.op == "send-imm" { // atomic.go
			wrs[i].Opcode, wrs[i].Imm = ofverbs.WRSendWithImm, immOf(t.pat.message(iter, size))
		}
	}
	return t.post(wrs)
}

// pollRecv refills the pending receive completions when they are used up.
func (t *verbsTransport) pollRecv() (bool, error) {
	if t.rpos < t.rn {
		return true, nil
	}
	n, err := t.recvCQ.Poll(t.rwcs[:])
	if err != nil {
		return false, t.errorf("poll receive CQ: %w", err)
	}
	t.rpos, t.rn = 0, n
	return n > 0, nil
}

// nextRecv waits for the next receive completion and returns its slot's
// payload; the slot stays held until release.
func (t *verbsTransport) nextRecv() ([]byte, error) {
	if t.held >= 0 {
		return nil, t.errorf("internal error: receive slot still held")
	}
	if ok, err := t.pollRecv(); !ok || err != nil {
		if err == nil {
			err = t.w.wait(t.pollRecv, func(d time.Duration) error { return t.block(t.recvCQ, t.pollRecv, d) })
		}
		if err != nil {
			return nil, err
		}
	}
	wc := t.rwcs[t.rpos]
	t.rpos++
	if err := wc.Err(); err != nil {
		// A failed send moves a UD or RD QP to ERROR, which flushes the
		// receives: the send's error, which may complete just after, is
		// the cause.
		for range 20 {
			if _, serr := t.reapSends(); serr != nil {
				return nil, serr
			}
			if t.outstanding <= 0 {
				break
			}
			time.Sleep(5 * time.Millisecond)
		}
		return nil, t.errorf("receive: %w", err)
	}
	if wc.ID >= uint64(t.slots) {
		return nil, t.errorf("receive completion for unknown slot %d", wc.ID)
	}
	t.held, t.heldWC = int(wc.ID), wc
	return t.slot(t.held)[:min(int(wc.ByteLen), t.slotSize)], nil
}

func (t *verbsTransport) recv(size int) ([]byte, error) {
	b, err := t.nextRecv()
	if err != nil {
		return nil, err
	}
	if wrecTest(t.op, t.kind) { // the message is in the region, the slot holds its record
		if b, err = t.recordedMessage(size); err != nil {
			return nil, err
		}
	}
	if t.op == "send-imm" || (t.op == "write-imm" && t.kind != "rc") { // atomic.go
		if err := t.checkImm(b); err != nil {
			return nil, err
		}
	}
	// Keep the send CQ drained on the way (lat sends one message per receive).
	if _, err := t.reapSends(); err != nil {
		return nil, err
	}
	return b, nil
}

func (t *verbsTransport) release() error {
	if t.held < 0 {
		return nil
	}
	i := t.held
	t.held = -1
	return t.postSlot(i)
}

func (t *verbsTransport) sendCredit(count uint64) error {
	binary.LittleEndian.PutUint64(t.cbuf[:], count)
	wr := &t.swr[0]
	wr.ID, wr.Opcode, wr.Inline, wr.InlineData, wr.SGL = count, ofverbs.WRSend, true, t.cbuf[:], nil
	return t.post(t.swr[:1])
}

// recvCredit waits for a credit, then takes every credit already completed
// and returns the highest (credits are cumulative).
func (t *verbsTransport) recvCredit() (uint64, error) {
	var c uint64
	for first := true; ; first = false {
		if !first {
			if ok, err := t.pollRecv(); err != nil || !ok {
				return c, err
			}
		}
		b, err := t.nextRecv()
		if err != nil {
			return 0, err
		}
		if len(b) != len(t.cbuf) {
			return 0, t.errorf("credit message of %d bytes, want %d", len(b), len(t.cbuf))
		}
		c = max(c, binary.LittleEndian.Uint64(b))
		if err := t.release(); err != nil {
			return 0, err
		}
	}
}

// allocData allocates n octets for data buffers: an ofverbs Buffer (-mem
// memfd: the daemon maps it) or Go heap memory (-mem user: registered as
// process memory, reached through the client's /proc/self/mem). Go's collector
// does not move heap objects; the MR keeps the slice reachable.
func allocData(mem string, ctx *ofverbs.Context, n int) ([]byte, error) {
	if mem == "user" {
		return make([]byte, n), nil
	}
	b, err := ctx.AllocBuffer(n)
	if err != nil {
		return nil, err
	}
	return b.Bytes(), nil
}
