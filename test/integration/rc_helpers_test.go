package integration

import (
	"bytes"
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/iwarpd/iwarpd/ofverbs"
	"github.com/iwarpd/iwarpd/proto"
	"github.com/iwarpd/iwarpd/test/daemontest"
)

// RC helpers: daemons on the RC tests' UDP port range, RC endpoints (an RC
// QP with a registered buffer), connecting them with the CM, and one
// function per opcode that moves data and verifies every byte. The opcode
// functions return errors (never t.Fatal) so that they can run in
// goroutines.

// The RC tests' UDP port range (UD ports are unused by RC traffic, but every
// daemon binds its range): two blocks of 50.
const (
	rcPortsA = "29500-29549"
	rcPortsB = "29550-29599"
)

// startRCDaemons starts two daemons (distinct sockets and UDP port blocks
// inside 29500-29599) with the extra flags.
func startRCDaemons(t *testing.T, name string, o daemontest.Options, extra ...string) (*daemon, *daemon) {
	t.Helper()
	oa, ob := o, o
	oa.Ports, ob.Ports = rcPortsA, rcPortsB
	oa.Extra, ob.Extra = slices.Concat(o.Extra, extra), slices.Concat(o.Extra, extra)
	if o.NS != nil {
		oa.NSIdx, ob.NSIdx = 0, 1
		oa.Addr, ob.Addr = o.NS.Addrs[0].Addr().String(), o.NS.Addrs[1].Addr().String()
	}
	return startDaemon(t, name+"-a", oa), startDaemon(t, name+"-b", ob)
}

// rcScratch is the size of each endpoint's scratch area (notification
// receives, MRs to invalidate).
const rcScratch = 4096

// rcEP is an RC QP in INIT (until connected) with one registered buffer:
// src (half octets), dst (half octets), scratch. The MR allows local
// write, remote write and remote read.
type rcEP struct {
	name     string
	ctx      *ofverbs.Context
	pd       *ofverbs.PD
	mem      []byte
	half     int
	mr       *ofverbs.MR
	scq, rcq *ofverbs.CQ
	qp       *ofverbs.QP
	wcs      [1]ofverbs.WC
}

const rcAccessAll = ofverbs.AccessLocalWrite | ofverbs.AccessRemoteWrite | ofverbs.AccessRemoteRead

func newRCEP(t *testing.T, name string, ctx *ofverbs.Context, half int, access ofverbs.Access, opts ...func(*ofverbs.QPInitAttr)) *rcEP {
	t.Helper()
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
	}
	e := &rcEP{name: name, ctx: ctx, half: half}
	var err error
	e.pd, err = ctx.AllocPD()
	must(err)
	buf, err := ctx.AllocBuffer(2*half + rcScratch)
	must(err)
	e.mem = buf.Bytes()
	e.mr, err = e.pd.RegMR(e.mem, access)
	must(err)
	e.scq, err = ctx.CreateCQ(256, nil)
	must(err)
	e.rcq, err = ctx.CreateCQ(256, nil)
	must(err)
	attr := ofverbs.QPInitAttr{Type: ofverbs.QPTypeRC, SendCQ: e.scq, RecvCQ: e.rcq,
		Cap: ofverbs.QPCap{MaxSendWR: 64, MaxRecvWR: 64, MaxSendSGE: 1, MaxRecvSGE: 1}}
	for _, o := range opts {
		o(&attr)
	}
	e.qp, err = e.pd.CreateQP(attr)
	must(err)
	must(e.qp.ModifyState(ofverbs.QPStateInit))
	return e
}

func (e *rcEP) src() []byte     { return e.mem[:e.half] }
func (e *rcEP) dst() []byte     { return e.mem[e.half : 2*e.half] }
func (e *rcEP) scratch() []byte { return e.mem[2*e.half:] }

// rcConnect connects cli to srv through listener l (srv's context): Accept
// runs in a goroutine while cli connects with the MPA options.
func rcConnect(t *testing.T, l *ofverbs.Listener, srv, cli *rcEP, opts ofverbs.MPAOptions) {
	t.Helper()
	if err := rcConnectErr(l, srv, cli, opts); err != nil {
		t.Fatal(err)
	}
}

func rcConnectErr(l *ofverbs.Listener, srv, cli *rcEP, opts ofverbs.MPAOptions) error {
	accepted := make(chan error, 1)
	go func() {
		req, err := l.GetRequest(scaled(15 * time.Second))
		if err != nil {
			accepted <- fmt.Errorf("%s: get request: %w", srv.name, err)
			return
		}
		accepted <- req.Accept(srv.qp, ofverbs.ConnParam{PrivateData: []byte(srv.name)})
	}()
	if err := cli.qp.Connect(l.Addr(), ofverbs.ConnParam{PrivateData: []byte(cli.name), MPA: opts,
		Timeout: scaled(10 * time.Second)}); err != nil {
		return fmt.Errorf("%s: connect to %v: %w", cli.name, l.Addr(), err)
	}
	select {
	case err := <-accepted:
		if err != nil {
			return fmt.Errorf("%s: accept: %w", srv.name, err)
		}
	case <-time.After(scaled(20 * time.Second)):
		return fmt.Errorf("%s: accept did not return", srv.name)
	}
	return nil
}

// pollWC waits (bounded) for the next completion of cq.
func (e *rcEP) pollWC(cq *ofverbs.CQ, timeout time.Duration) (ofverbs.WC, error) {
	deadline := time.Now().Add(scaled(timeout))
	for spins := 0; ; spins++ {
		n, err := cq.Poll(e.wcs[:])
		if err != nil {
			return ofverbs.WC{}, fmt.Errorf("%s: poll: %w", e.name, err)
		}
		if n == 1 {
			return e.wcs[0], nil
		}
		if time.Now().After(deadline) {
			return ofverbs.WC{}, fmt.Errorf("%s: no completion within %v: %w", e.name, scaled(timeout), errTimeout)
		}
		if spins < 200 {
			schedYield()
		} else {
			time.Sleep(100 * time.Microsecond)
		}
	}
}

// expectWC waits for a successful completion with this ID, opcode and
// length.
func (e *rcEP) expectWC(cq *ofverbs.CQ, id uint64, op ofverbs.WCOpcode, n int) (ofverbs.WC, error) {
	wc, err := e.pollWC(cq, 30*time.Second)
	if err != nil {
		return wc, err
	}
	if wc.Err() != nil || wc.ID != id || wc.Opcode != op || wc.ByteLen != uint32(n) || wc.QPN != e.qp.QPN() {
		return wc, fmt.Errorf("%s: completion %+v (%v), want ID %d %v of %d octets on QPN %d", e.name, wc, wc.Err(), id, op, n, e.qp.QPN())
	}
	return wc, nil
}

func (e *rcEP) post(wr ofverbs.SendWR) error {
	if n, err := e.qp.PostSend([]ofverbs.SendWR{wr}); n != 1 {
		return fmt.Errorf("%s: post %v: %w", e.name, wr.Opcode, err)
	}
	return nil
}

func (e *rcEP) postRecv(id uint64, b []byte) error {
	if n, err := e.qp.PostRecv([]ofverbs.RecvWR{{ID: id, SGL: []ofverbs.SGE{e.mr.SGE(b)}}}); n != 1 {
		return fmt.Errorf("%s: post receive: %w", e.name, err)
	}
	return nil
}

// fillPattern writes byte i = (seed + i) mod 251.
func fillPattern(b []byte, seed int) {
	for i := range b {
		b[i] = byte((seed + i) % patPeriod)
	}
}

// sameBytes compares and names the first difference.
func sameBytes(what string, got, want []byte) error {
	if bytes.Equal(got, want) {
		return nil
	}
	i := 0
	for i < len(got) && i < len(want) && got[i] == want[i] {
		i++
	}
	if i >= len(got) || i >= len(want) {
		return fmt.Errorf("%s: %d octets, want %d", what, len(got), len(want))
	}
	return fmt.Errorf("%s: octet %d of %d is %#x, want %#x", what, i, len(want), got[i], want[i])
}

// sendKind selects the Send variant.
type sendKind struct {
	solicited, invalidate bool
}

func (k sendKind) String() string {
	s := "Send"
	if k.solicited {
		s += " SE"
	}
	if k.invalidate {
		s += " with Invalidate"
	}
	return s
}

// rcSend sends size octets from→to with the variant k and checks both
// completions and every octet. With invalidate, the receiver registers a
// scratch MR for the sender to invalidate and checks it was.
func rcSend(from, to *rcEP, size, seed int, k sendKind) error {
	src, dst := from.src()[:size], to.dst()[:size]
	fillPattern(src, seed)
	clear(dst)
	id := uint64(seed)
	if err := to.postRecv(id, dst); err != nil {
		return err
	}
	wr := ofverbs.SendWR{ID: id, Opcode: ofverbs.WRSend, SGL: []ofverbs.SGE{from.mr.SGE(src)}, Signaled: true, Solicited: k.solicited}
	var inv *ofverbs.MR
	if k.invalidate {
		var err error
		if inv, err = to.pd.RegMR(to.scratch()[:512], ofverbs.AccessLocalWrite|ofverbs.AccessRemoteWrite); err != nil {
			return err
		}
		defer inv.Close()
		wr.Opcode, wr.InvStag = ofverbs.WRSendInvalidate, inv.RKey()
	}
	if err := from.post(wr); err != nil {
		return err
	}
	if _, err := from.expectWC(from.scq, id, ofverbs.WCSend, size); err != nil {
		return fmt.Errorf("%v of %d: %w", k, size, err)
	}
	wc, err := to.expectWC(to.rcq, id, ofverbs.WCRecv, size)
	if err != nil {
		return fmt.Errorf("%v of %d: %w", k, size, err)
	}
	if wc.Solicited() != k.solicited {
		return fmt.Errorf("%v of %d: receive completion flags %#x", k, size, wc.Flags)
	}
	if k.invalidate && (wc.Flags&ofverbs.WCFlagWithInv == 0 || wc.InvStag != inv.RKey()) {
		return fmt.Errorf("%v of %d: receive completion %+v, want invalidated STag %#x", k, size, wc, inv.RKey())
	}
	if !k.invalidate && wc.Flags&ofverbs.WCFlagWithInv != 0 {
		return fmt.Errorf("%v of %d: receive completion %+v with an invalidation", k, size, wc)
	}
	return sameBytes(fmt.Sprintf("%v of %d %s→%s", k, size, from.name, to.name), dst, src)
}

// rcWrite writes size octets from from's src into to's dst, then sends a
// one-octet Send after it (placed after the Write, RFC 5040 §5.5) and
// checks to's memory when that arrives.
func rcWrite(from, to *rcEP, size, seed int) error {
	src, dst := from.src()[:size], to.dst()[:size]
	fillPattern(src, seed)
	clear(dst)
	id := uint64(seed)
	note := to.scratch()[1024:1025]
	if err := to.postRecv(id, note); err != nil {
		return err
	}
	if err := from.post(ofverbs.SendWR{ID: id, Opcode: ofverbs.WRRDMAWrite, SGL: []ofverbs.SGE{from.mr.SGE(src)},
		RKey: to.mr.RKey(), RemoteAddr: to.mr.SGE(dst).Addr, Signaled: true}); err != nil {
		return err
	}
	if err := from.post(ofverbs.SendWR{ID: id + 1, Opcode: ofverbs.WRSend, SGL: []ofverbs.SGE{from.mr.SGE(from.scratch()[:1])},
		Signaled: true}); err != nil {
		return err
	}
	if _, err := from.expectWC(from.scq, id, ofverbs.WCRDMAWrite, size); err != nil {
		return fmt.Errorf("Write of %d: %w", size, err)
	}
	if _, err := from.expectWC(from.scq, id+1, ofverbs.WCSend, 1); err != nil {
		return fmt.Errorf("Send after the Write of %d: %w", size, err)
	}
	if _, err := to.expectWC(to.rcq, id, ofverbs.WCRecv, 1); err != nil {
		return fmt.Errorf("Send after the Write of %d: %w", size, err)
	}
	return sameBytes(fmt.Sprintf("RDMA Write of %d %s→%s", size, from.name, to.name), dst, src)
}

// rcRead reads size octets of to's src into from's dst.
func rcRead(from, to *rcEP, size, seed int) error {
	src, dst := to.src()[:size], from.dst()[:size]
	fillPattern(src, seed)
	clear(dst)
	id := uint64(seed)
	if err := from.post(ofverbs.SendWR{ID: id, Opcode: ofverbs.WRRDMARead, SGL: []ofverbs.SGE{from.mr.SGE(dst)},
		RKey: to.mr.RKey(), RemoteAddr: to.mr.SGE(src).Addr, Signaled: true}); err != nil {
		return err
	}
	if _, err := from.expectWC(from.scq, id, ofverbs.WCRDMARead, size); err != nil {
		return fmt.Errorf("Read of %d: %w", size, err)
	}
	return sameBytes(fmt.Sprintf("RDMA Read of %d by %s from %s", size, from.name, to.name), dst, src)
}

// rcLocalInvalidate registers an MR on the scratch area and invalidates it
// with a local invalidate work request; it returns the dead STag.
func rcLocalInvalidate(e *rcEP, id uint64) (uint32, error) {
	mr, err := e.pd.RegMR(e.scratch()[2048:], ofverbs.AccessLocalWrite|ofverbs.AccessRemoteWrite)
	if err != nil {
		return 0, err
	}
	if err := e.post(ofverbs.SendWR{ID: id, Opcode: proto.WRLocalInvalidate, InvStag: mr.LKey(), Signaled: true}); err != nil {
		return 0, err
	}
	if _, err := e.expectWC(e.scq, id, proto.WCLocalInvalidate, 0); err != nil {
		return 0, fmt.Errorf("local invalidate: %w", err)
	}
	return mr.RKey(), nil
}

// rcAllOpcodes runs every opcode from→to at size (Sends in four variants,
// Write, Read), seeds derived from base.
func rcAllOpcodes(from, to *rcEP, size, base int) error {
	for i, k := range []sendKind{{}, {solicited: true}, {invalidate: true}, {solicited: true, invalidate: true}} {
		if err := rcSend(from, to, size, base+10*i, k); err != nil {
			return err
		}
	}
	if err := rcWrite(from, to, size, base+50); err != nil {
		return err
	}
	return rcRead(from, to, size, base+70)
}

// qpState returns the QP's state.
func rcQPState(e *rcEP) (ofverbs.QPState, error) {
	a, err := e.qp.Query()
	return a.State, err
}

// waitQPState polls (bounded) until e's QP is in s.
func waitQPState(e *rcEP, s ofverbs.QPState, timeout time.Duration) error {
	deadline := time.Now().Add(scaled(timeout))
	for {
		got, err := rcQPState(e)
		if err != nil {
			return err
		}
		if got == s {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s: QP in %v after %v, want %v", e.name, got, scaled(timeout), s)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// waitAsync waits (bounded) for an asynchronous event of type typ about
// e's QP, ignoring others.
func waitAsync(e *rcEP, typ ofverbs.EventType, timeout time.Duration) (ofverbs.AsyncEvent, error) {
	t := time.NewTimer(scaled(timeout))
	defer t.Stop()
	for {
		select {
		case ev, ok := <-e.ctx.AsyncEvents():
			if !ok {
				return ev, errors.New("async events closed")
			}
			if ev.Handle == e.qp.Handle() && ev.Type == typ {
				return ev, nil
			}
		case <-t.C:
			return ofverbs.AsyncEvent{}, fmt.Errorf("%s: no %v event within %v", e.name, typ, scaled(timeout))
		}
	}
}

// waitCM waits (bounded) for a CM event of type typ on e's QP.
func waitCM(e *rcEP, typ ofverbs.CMEventType, timeout time.Duration) (ofverbs.CMEvent, error) {
	t := time.NewTimer(scaled(timeout))
	defer t.Stop()
	for {
		select {
		case ev := <-e.qp.CMEvents():
			if ev.Type == typ {
				return ev, nil
			}
		case <-t.C:
			return ofverbs.CMEvent{}, fmt.Errorf("%s: no %v CM event within %v", e.name, typ, scaled(timeout))
		}
	}
}

// listenOn makes ctx listen on the device address at port (0: ephemeral).
func listenOn(t *testing.T, ctx *ofverbs.Context, port int) *ofverbs.Listener {
	t.Helper()
	l, err := ctx.Listen(fmt.Sprintf(":%d", port))
	if err != nil {
		t.Fatalf("listen on :%d: %v", port, err)
	}
	t.Cleanup(func() { l.Close() })
	return l
}
