package ofverbs_test

import (
	"bytes"
	"errors"
	"net/netip"
	"os"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/iwarpd/iwarpd/ofverbs"
	"github.com/iwarpd/iwarpd/test/daemontest"
	"golang.org/x/sys/unix"
)

// End-to-end tests against the real daemon, run as a separate process per
// test by test/daemontest (which imports ofverbs: these tests are the
// external test package).

// udBlocks: the UD port blocks of this package's daemons, 24000-24099
// (test/daemontest doc.go).
var udBlocks = daemontest.Blocks{Base: 24000, Size: 10, Count: 10}

// TestMain builds the programs (test/daemontest.Main).
func TestMain(m *testing.M) { os.Exit(daemontest.Main(m, nil)) }

// daemonProc is a daemon startDaemon started.
type daemonProc struct {
	sock   string
	ports  string // -ud-ports
	signal func(syscall.Signal)
}

// startDaemon runs iwarpd (test/daemontest.Start) with the extra flags
// after -log-level debug on a private socket and the next UD port block,
// and waits (bounded) until it answers Hello; cleanup stops it and fails
// the test if it died on its own.
func startDaemon(t *testing.T, extra ...string) *daemonProc {
	t.Helper()
	ports := udBlocks.Next()
	d := daemontest.Start(t, "iwarpd-"+ports, daemontest.Options{Ports: ports,
		Extra: append([]string{"-log-level", "debug"}, extra...)})
	return &daemonProc{sock: d.Sock, ports: d.Ports, signal: func(sig syscall.Signal) { d.Signal(t, sig) }}
}

// scaled stretches a timeout on slow machines (IWARPD_TEST_TIMEOUT_SCALE).
var scaled = daemontest.Scaled

func (d *daemonProc) open(t *testing.T) *ofverbs.Context {
	t.Helper()
	c, err := ofverbs.Open(ofverbs.WithSocket(d.sock), ofverbs.WithClientName(t.Name()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// endpoint is a UD QP with a registered buffer and its CQs.
type endpoint struct {
	ctx    *ofverbs.Context
	pd     *ofverbs.PD
	buf    *ofverbs.Buffer
	mr     *ofverbs.MR
	ch     *ofverbs.CompChannel
	sendCQ *ofverbs.CQ
	recvCQ *ofverbs.CQ
	qp     *ofverbs.QP
	srq    *ofverbs.SRQ
}

type epOpts struct {
	bufSize int
	srq     bool
	maxSGE  uint32
	inline  uint32
	depth   uint32
	channel bool
}

func newEndpoint(t *testing.T, c *ofverbs.Context, o epOpts) *endpoint {
	t.Helper()
	if o.bufSize == 0 {
		o.bufSize = 1 << 20
	}
	if o.maxSGE == 0 {
		o.maxSGE = 4
	}
	if o.depth == 0 {
		o.depth = 64
	}
	e := &endpoint{ctx: c}
	var err error
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	e.pd, err = c.AllocPD()
	must(err)
	e.buf, err = c.AllocBuffer(o.bufSize)
	must(err)
	e.mr, err = e.pd.RegMR(e.buf.Bytes(), ofverbs.AccessLocalWrite)
	must(err)
	if o.channel {
		e.ch, err = c.CreateCompChannel()
		must(err)
	}
	e.sendCQ, err = c.CreateCQ(int(o.depth), nil)
	must(err)
	e.recvCQ, err = c.CreateCQ(int(o.depth), e.ch)
	must(err)
	attr := ofverbs.QPInitAttr{Type: ofverbs.QPTypeUD, SendCQ: e.sendCQ, RecvCQ: e.recvCQ,
		Cap: ofverbs.QPCap{MaxSendWR: o.depth, MaxRecvWR: o.depth, MaxSendSGE: o.maxSGE, MaxRecvSGE: o.maxSGE, MaxInline: o.inline}}
	if o.srq {
		e.srq, err = e.pd.CreateSRQ(ofverbs.SRQInitAttr{MaxWR: o.depth, MaxSGE: o.maxSGE})
		must(err)
		attr.SRQ = e.srq
	}
	e.qp, err = e.pd.CreateQP(attr)
	must(err)
	if !e.qp.Addr().IsValid() {
		t.Fatalf("UD QP has no address: %v", e.qp.Addr())
	}
	must(e.qp.ModifyState(ofverbs.QPStateInit, ofverbs.QPStateRTR, ofverbs.QPStateRTS))
	return e
}

func (e *endpoint) ahTo(t *testing.T, peer *endpoint) *ofverbs.AH {
	t.Helper()
	ah, err := e.pd.CreateAHTo(peer.qp.Endpoint())
	if err != nil {
		t.Fatal(err)
	}
	return ah
}

// postRecvs posts n receive buffers of size bytes each, at slot i·size.
func (e *endpoint) postRecvs(t *testing.T, first, n, size int) {
	t.Helper()
	b := e.buf.Bytes()
	wrs := make([]ofverbs.RecvWR, n)
	for i := range wrs {
		off := (first + i) * size
		wrs[i] = ofverbs.RecvWR{ID: uint64(first + i), SGL: []ofverbs.SGE{e.mr.SGE(b[off : off+size])}}
	}
	post := e.qp.PostRecv
	if e.srq != nil {
		post = e.srq.PostRecv
	}
	if got, err := post(wrs); got != n || err != nil {
		t.Fatalf("PostRecv = %d, %v", got, err)
	}
}

// waitWC polls cq until n completions arrived (or fails after timeout).
func waitWC(t *testing.T, cq *ofverbs.CQ, n int, timeout time.Duration) []ofverbs.WC {
	t.Helper()
	out := make([]ofverbs.WC, 0, n)
	wcs := make([]ofverbs.WC, 16)
	deadline := time.Now().Add(scaled(timeout))
	for len(out) < n {
		got, err := cq.Poll(wcs[:min(len(wcs), n-len(out))])
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, wcs[:got]...)
		if got == 0 {
			if time.Now().After(deadline) {
				t.Fatalf("got %d of %d completions within %v: %+v", len(out), n, timeout, out)
			}
			time.Sleep(200 * time.Microsecond)
		}
	}
	return out
}

// expectNoWC checks that cq stays empty for a while.
func expectNoWC(t *testing.T, cq *ofverbs.CQ, d time.Duration) {
	t.Helper()
	time.Sleep(d)
	wcs := make([]ofverbs.WC, 4)
	if n, _ := cq.Poll(wcs); n != 0 {
		t.Fatalf("unexpected completions: %+v", wcs[:n])
	}
}

func pattern(b []byte, seed int) {
	for i := range b {
		b[i] = byte(seed*31 + i*7 + i>>8)
	}
}

func TestDaemonOpenQueryList(t *testing.T) {
	d := startDaemon(t)
	c := d.open(t)
	attr, err := c.QueryDevice()
	if err != nil {
		t.Fatal(err)
	}
	if attr.MaxQP <= 0 || attr.MaxSGE <= 0 || attr.MaxQPWR <= 0 || attr.MaxMsgUD <= 0 || attr.Name == "" {
		t.Fatalf("device attributes %+v", attr)
	}
	port, err := c.QueryPort()
	if err != nil {
		t.Fatal(err)
	}
	if port.UDPorts != d.ports || port.State != "active" {
		t.Fatalf("port %+v", port)
	}
	devs, err := ofverbs.ListDevices(ofverbs.WithSocket(d.sock))
	if err != nil || len(devs) != 1 || devs[0].Name != attr.Name || devs[0].Attr != attr {
		t.Fatalf("ListDevices = %+v, %v", devs, err)
	}
	t.Setenv(ofverbs.EnvSocket, d.sock)
	if devs, err := ofverbs.ListDevices(); err != nil || len(devs) != 1 {
		t.Fatalf("ListDevices via %s = %+v, %v", ofverbs.EnvSocket, devs, err)
	}
}

// pingPong sends rounds messages from a to b and back, every byte checked.
func pingPong(t *testing.T, a, b *endpoint, sizes []int) {
	t.Helper()
	const slot = 64 << 10
	abAH, baAH := a.ahTo(t, b), b.ahTo(t, a)
	for round, size := range sizes {
		for _, dir := range []struct {
			from, to *endpoint
			ah       *ofverbs.AH
		}{{a, b, abAH}, {b, a, baAH}} {
			from, to := dir.from, dir.to
			to.postRecvs(t, 0, 1, slot)
			msg := from.buf.Bytes()[slot : slot+size]
			pattern(msg, round)
			clear(to.buf.Bytes()[:slot])
			n, err := from.qp.PostSend([]ofverbs.SendWR{{ID: uint64(1000 + round), Opcode: ofverbs.WRSend, SGL: []ofverbs.SGE{from.mr.SGE(msg)}, Signaled: true, AH: dir.ah}})
			if n != 1 || err != nil {
				t.Fatalf("PostSend = %d, %v", n, err)
			}
			sw := waitWC(t, from.sendCQ, 1, 5*time.Second)[0]
			if sw.Err() != nil || sw.ID != uint64(1000+round) || sw.Opcode != ofverbs.WCSend || sw.ByteLen != uint32(size) {
				t.Fatalf("send completion %+v (%v)", sw, sw.Err())
			}
			rw := waitWC(t, to.recvCQ, 1, 5*time.Second)[0]
			if rw.Err() != nil || rw.ID != 0 || rw.Opcode != ofverbs.WCRecv || rw.ByteLen != uint32(size) {
				t.Fatalf("round %d size %d: receive completion %+v (%v)", round, size, rw, rw.Err())
			}
			if rw.Flags&ofverbs.WCFlagSrcValid == 0 || rw.Src != from.qp.Addr() || rw.QPN != to.qp.QPN() {
				t.Fatalf("receive completion source %v (valid %v) QPN %d, want %v QPN %d", rw.Src, rw.Flags&ofverbs.WCFlagSrcValid != 0, rw.QPN, from.qp.Addr(), to.qp.QPN())
			}
			if got := to.buf.Bytes()[:size]; !bytes.Equal(got, msg) {
				t.Fatalf("round %d size %d: payload differs", round, size)
			}
		}
	}
}

func TestDaemonPingPongOneContext(t *testing.T) {
	d := startDaemon(t)
	c := d.open(t)
	a, b := newEndpoint(t, c, epOpts{}), newEndpoint(t, c, epOpts{})
	pingPong(t, a, b, []int{1, 64, 1000, 1472, 4000, 20000, 0, 65536})
}

func TestDaemonPingPongTwoContexts(t *testing.T) {
	d := startDaemon(t)
	a, b := newEndpoint(t, d.open(t), epOpts{}), newEndpoint(t, d.open(t), epOpts{})
	// Pause between rounds so that the engine goes to sleep and the
	// doorbell path is exercised too.
	for i := range 5 {
		pingPong(t, a, b, []int{100 + i})
		time.Sleep(5 * time.Millisecond)
	}
}

func TestDaemonSolicitedEvent(t *testing.T) {
	d := startDaemon(t)
	c := d.open(t)
	a, b := newEndpoint(t, c, epOpts{}), newEndpoint(t, c, epOpts{channel: true})
	ah := a.ahTo(t, b)
	b.postRecvs(t, 0, 4, 4096)
	if err := b.recvCQ.ReqNotify(true); err != nil {
		t.Fatal(err)
	}
	msg := a.mr.SGE(a.buf.Bytes()[:100])
	// A plain send completes but does not wake a solicited-only arming.
	if n, err := a.qp.PostSend([]ofverbs.SendWR{{ID: 1, SGL: []ofverbs.SGE{msg}, AH: ah}}); n != 1 || err != nil {
		t.Fatal(n, err)
	}
	w := waitWC(t, b.recvCQ, 1, 5*time.Second)[0]
	if w.Err() != nil || w.Solicited() {
		t.Fatalf("plain receive %+v", w)
	}
	if cq, err := b.ch.GetEventTimeout(scaled(200 * time.Millisecond)); !errors.Is(err, unix.ETIMEDOUT) {
		t.Fatalf("event for an unsolicited message: %v %v", cq, err)
	}
	// Send with Solicited Event: one event, the CQ is named.
	if n, err := a.qp.PostSend([]ofverbs.SendWR{{ID: 2, SGL: []ofverbs.SGE{msg}, AH: ah, Solicited: true}}); n != 1 || err != nil {
		t.Fatal(n, err)
	}
	cq, err := b.ch.GetEventTimeout(scaled(5 * time.Second))
	if err != nil || cq != b.recvCQ {
		t.Fatalf("GetEvent = %v, %v", cq, err)
	}
	cq.AckEvents(1)
	w = waitWC(t, b.recvCQ, 1, 5*time.Second)[0]
	if w.Err() != nil || !w.Solicited() || w.ByteLen != 100 {
		t.Fatalf("solicited receive %+v", w)
	}
	// Re-armed for any completion: the next plain message wakes it.
	if err := b.recvCQ.ReqNotify(false); err != nil {
		t.Fatal(err)
	}
	a.qp.PostSend([]ofverbs.SendWR{{ID: 3, SGL: []ofverbs.SGE{msg}, AH: ah}})
	if cq, err := b.ch.GetEventTimeout(scaled(5 * time.Second)); err != nil || cq != b.recvCQ {
		t.Fatalf("GetEvent after ReqNotify(false) = %v, %v", cq, err)
	}
	waitWC(t, b.recvCQ, 1, 5*time.Second)
}

func TestDaemonUnsignaledInlineAndSGEs(t *testing.T) {
	d := startDaemon(t)
	c := d.open(t)
	a := newEndpoint(t, c, epOpts{inline: 128, maxSGE: 4})
	b := newEndpoint(t, c, epOpts{maxSGE: 4})
	ah := a.ahTo(t, b)
	ab := a.buf.Bytes()

	// Unsignaled sends: only the signaled last one completes at the sender.
	const count = 10
	b.postRecvs(t, 0, count, 1024)
	wrs := make([]ofverbs.SendWR, count)
	for i := range wrs {
		m := ab[i*1024 : i*1024+50+i]
		pattern(m, i)
		wrs[i] = ofverbs.SendWR{ID: uint64(i), SGL: []ofverbs.SGE{a.mr.SGE(m)}, AH: ah, Signaled: i == count-1}
	}
	if n, err := a.qp.PostSend(wrs); n != count || err != nil {
		t.Fatal(n, err)
	}
	rws := waitWC(t, b.recvCQ, count, 5*time.Second)
	for i, w := range rws {
		if w.Err() != nil || w.ID != uint64(i) || w.ByteLen != uint32(50+i) {
			t.Fatalf("receive %d: %+v", i, w)
		}
		if !bytes.Equal(b.buf.Bytes()[i*1024:i*1024+50+i], ab[i*1024:i*1024+50+i]) {
			t.Fatalf("message %d differs", i)
		}
	}
	sws := waitWC(t, a.sendCQ, 1, 5*time.Second)
	if sws[0].ID != count-1 || sws[0].Err() != nil {
		t.Fatalf("send completion %+v", sws[0])
	}
	expectNoWC(t, a.sendCQ, 20*time.Millisecond)

	// Inline sends: the source may change right after PostSend.
	b.postRecvs(t, 0, 2, 1024)
	inl := ab[100000 : 100000+100]
	pattern(inl, 7)
	want1 := bytes.Clone(inl)
	want2 := []byte("inline from a Go slice")
	if n, err := a.qp.PostSend([]ofverbs.SendWR{
		{ID: 20, Inline: true, SGL: []ofverbs.SGE{a.mr.SGE(inl[:60]), a.mr.SGE(inl[60:])}, AH: ah, Signaled: true},
		{ID: 21, Inline: true, InlineData: want2, AH: ah, Signaled: true},
	}); n != 2 || err != nil {
		t.Fatal(n, err)
	}
	clear(inl)
	waitWC(t, a.sendCQ, 2, 5*time.Second)
	rws = waitWC(t, b.recvCQ, 2, 5*time.Second)
	if rws[0].ByteLen != 100 || !bytes.Equal(b.buf.Bytes()[:100], want1) {
		t.Fatalf("inline from SGEs: %+v % x", rws[0], b.buf.Bytes()[:16])
	}
	if rws[1].ByteLen != uint32(len(want2)) || !bytes.Equal(b.buf.Bytes()[1024:1024+len(want2)], want2) {
		t.Fatalf("inline data: %+v %q", rws[1], b.buf.Bytes()[1024:1024+len(want2)])
	}

	// Several SGEs: gathered from 3 pieces, scattered into 2.
	pieces := [][]byte{ab[200000:200010], ab[300000:300500], ab[400000:401000]}
	var whole []byte
	for i, p := range pieces {
		pattern(p, 40+i)
		whole = append(whole, p...)
	}
	bb := b.buf.Bytes()
	clear(bb[:300000])
	if n, err := b.qp.PostRecv([]ofverbs.RecvWR{{ID: 30, SGL: []ofverbs.SGE{b.mr.SGE(bb[5000:5700]), b.mr.SGE(bb[9000:10000])}}}); n != 1 || err != nil {
		t.Fatal(n, err)
	}
	sgl := []ofverbs.SGE{a.mr.SGE(pieces[0]), a.mr.SGE(pieces[1]), a.mr.SGE(pieces[2])}
	if n, err := a.qp.PostSend([]ofverbs.SendWR{{ID: 31, SGL: sgl, AH: ah, Signaled: true}}); n != 1 || err != nil {
		t.Fatal(n, err)
	}
	waitWC(t, a.sendCQ, 1, 5*time.Second)
	w := waitWC(t, b.recvCQ, 1, 5*time.Second)[0]
	if w.Err() != nil || w.ID != 30 || w.ByteLen != uint32(len(whole)) {
		t.Fatalf("scattered receive %+v", w)
	}
	got := append(bytes.Clone(bb[5000:5700]), bb[9000:9000+len(whole)-700]...)
	if !bytes.Equal(got, whole) {
		t.Fatal("gather/scatter payload differs")
	}
}

func TestDaemonSRQ(t *testing.T) {
	d := startDaemon(t)
	c := d.open(t)
	a := newEndpoint(t, c, epOpts{})
	b := newEndpoint(t, c, epOpts{srq: true})
	ah := a.ahTo(t, b)
	b.postRecvs(t, 0, 8, 2048)
	for i := range 8 {
		m := a.buf.Bytes()[i*2048 : i*2048+300+i]
		pattern(m, i)
		if n, err := a.qp.PostSend([]ofverbs.SendWR{{ID: uint64(i), SGL: []ofverbs.SGE{a.mr.SGE(m)}, AH: ah}}); n != 1 || err != nil {
			t.Fatal(n, err)
		}
	}
	ws := waitWC(t, b.recvCQ, 8, 5*time.Second)
	for i, w := range ws {
		if w.Err() != nil || w.ID != uint64(i) || w.ByteLen != uint32(300+i) || w.QPN != b.qp.QPN() {
			t.Fatalf("SRQ receive %d: %+v", i, w)
		}
		if !bytes.Equal(b.buf.Bytes()[i*2048:i*2048+300+i], a.buf.Bytes()[i*2048:i*2048+300+i]) {
			t.Fatalf("message %d differs", i)
		}
	}
}

func TestDaemonErrorsKeepErrno(t *testing.T) {
	d := startDaemon(t)
	c := d.open(t)
	e := newEndpoint(t, c, epOpts{bufSize: 8192})
	// Unknown handles are EINVAL (verbs convention).
	if err := ofverbs.ForgedQP(c, 9999).Modify(ofverbs.QPAttr{State: ofverbs.QPStateInit}); !errors.Is(err, unix.EINVAL) {
		t.Fatalf("modify unknown QP: %v", err)
	}
	// An address handle is checked by the client (ABI 2): a bad address or
	// one of the wrong family is EINVAL.
	if _, err := e.pd.CreateAH(netip.AddrPort{}); !errors.Is(err, unix.EINVAL) {
		t.Fatalf("AH to no address: %v", err)
	}
	if _, err := e.pd.CreateAH(netip.MustParseAddrPort("[2001:db8::1]:4791")); !errors.Is(err, unix.EINVAL) {
		t.Fatalf("IPv6 AH on an IPv4 device: %v", err)
	}
	var ve *ofverbs.Error
	if _, err := ofverbs.ForgedPD(c, 9999).RegMR(e.buf.Bytes(), ofverbs.AccessLocalWrite); !errors.As(err, &ve) || ve.Errno != unix.EINVAL || ve.Msg == "" {
		t.Fatalf("RegMR on unknown PD: %#v", err)
	}
	// Invalid access flags (remote write without local write).
	if _, err := e.pd.RegMR(e.buf.Bytes()[:100], ofverbs.AccessRemoteWrite); !errors.Is(err, unix.EINVAL) {
		t.Fatalf("RegMR with invalid access: %v", err)
	}
	// A PD in use cannot go.
	if err := e.pd.Close(); !errors.Is(err, unix.EBUSY) {
		t.Fatalf("dealloc busy PD: %v", err)
	}
	// Bad state transition.
	if err := e.qp.Modify(ofverbs.QPAttr{State: ofverbs.QPStateRTR}); !errors.Is(err, unix.EINVAL) {
		t.Fatalf("RTS→RTR: %v", err)
	}
	// Other session's handle.
	c2 := d.open(t)
	if err := ofverbs.ForgedQP(c2, e.qp.Handle()).Modify(ofverbs.QPAttr{State: ofverbs.QPStateError}); !errors.Is(err, unix.EINVAL) {
		t.Fatalf("another session's QP: %v", err)
	}
	// A bad lkey fails the work request with a protection error, and the
	// QP goes to ERROR.
	ah := e.ahTo(t, e)
	e.postRecvs(t, 0, 1, 1024)
	if n, err := e.qp.PostSend([]ofverbs.SendWR{{ID: 77, SGL: []ofverbs.SGE{{Addr: e.mr.Addr(), Length: 10, LKey: e.mr.LKey() ^ 0xff}}, AH: ah}}); n != 1 || err != nil {
		t.Fatal(n, err)
	}
	w := waitWC(t, e.sendCQ, 1, 5*time.Second)[0]
	if w.ID != 77 || w.Status != ofverbs.WCLocProtErr {
		t.Fatalf("bad lkey completion %+v", w)
	}
	attr, err := e.qp.Query()
	if err != nil || attr.State != ofverbs.QPStateError || attr.QPN != e.qp.QPN() {
		t.Fatalf("QP after a local error: %+v, %v", attr, err)
	}
	rw := waitWC(t, e.recvCQ, 1, 5*time.Second)[0]
	if rw.Status != ofverbs.WCWRFlushErr {
		t.Fatalf("posted receive after ERROR: %+v", rw)
	}
	// The session is still fine.
	if _, err := c.QueryDevice(); err != nil {
		t.Fatal(err)
	}
}

func TestDaemonKilledUnderClient(t *testing.T) {
	d := startDaemon(t)
	c := d.open(t)
	e := newEndpoint(t, c, epOpts{bufSize: 8192, channel: true})
	if err := e.recvCQ.ReqNotify(false); err != nil {
		t.Fatal(err)
	}
	got := make(chan error, 1)
	go func() { _, err := e.ch.GetEvent(); got <- err }()
	time.Sleep(20 * time.Millisecond)
	d.signal(syscall.SIGKILL)
	select {
	case err := <-got:
		if !errors.Is(err, unix.ENODEV) {
			t.Fatalf("GetEvent after SIGKILL: %v", err)
		}
	case <-time.After(scaled(30 * time.Second)): // bounds the wait only
		t.Fatal("GetEvent still blocked after the daemon was killed")
	}
	// The context knows the daemon is gone: no timing is asserted (a hang
	// would end in the test binary's timeout).
	if _, err := c.QueryDevice(); !errors.Is(err, unix.ENODEV) {
		t.Fatalf("QueryDevice after SIGKILL: %v", err)
	}
	if _, err := e.pd.CreateAHTo(e.qp.Endpoint()); !errors.Is(err, unix.ENODEV) {
		t.Fatalf("CreateAH after SIGKILL: %v", err)
	}
	if !errors.Is(c.Err(), unix.ENODEV) {
		t.Fatalf("Err() = %v", c.Err())
	}
	var fatal bool
	for ev := range c.AsyncEvents() {
		fatal = fatal || ev.Type == ofverbs.EventDeviceFatal
	}
	if !fatal {
		t.Fatal("no device-fatal event")
	}
	// The data path still accepts work (nothing will complete).
	if n, err := e.qp.PostRecv([]ofverbs.RecvWR{{ID: 1, SGL: []ofverbs.SGE{e.mr.SGE(e.buf.Bytes()[:10])}}}); n != 1 || err != nil {
		t.Fatalf("PostRecv after death: %d %v", n, err)
	}
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
}

// Several goroutines post on one QP and poll one CQ at once (run with -race).
func TestDaemonConcurrentPostAndPoll(t *testing.T) {
	d := startDaemon(t)
	c := d.open(t)
	a := newEndpoint(t, c, epOpts{depth: 256})
	b := newEndpoint(t, c, epOpts{depth: 256})
	ah := a.ahTo(t, b)
	const workers, each, size = 4, 50, 256
	b.postRecvs(t, 0, workers*each, size)
	var wg sync.WaitGroup
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range each {
				id := w*each + i
				m := a.buf.Bytes()[id*size : id*size+size]
				for j := range m {
					m[j] = byte(id)
				}
				for {
					n, err := a.qp.PostSend([]ofverbs.SendWR{{ID: uint64(id), SGL: []ofverbs.SGE{a.mr.SGE(m)}, AH: ah, Signaled: true}})
					if n == 1 {
						break
					}
					if !errors.Is(err, unix.ENOMEM) {
						t.Error(err)
						return
					}
					time.Sleep(100 * time.Microsecond) // SQ full: wait for the engine
				}
			}
		}()
	}
	var sent atomic.Int32
	for range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			wcs := make([]ofverbs.WC, 8)
			deadline := time.Now().Add(scaled(10 * time.Second))
			for sent.Load() < workers*each && time.Now().Before(deadline) {
				n, err := a.sendCQ.Poll(wcs)
				if err != nil {
					t.Error(err)
					return
				}
				for _, w := range wcs[:n] {
					if w.Err() != nil {
						t.Errorf("send completion %+v", w)
					}
				}
				sent.Add(int32(n))
				if n == 0 {
					time.Sleep(100 * time.Microsecond)
				}
			}
		}()
	}
	got := waitWC(t, b.recvCQ, workers*each, 10*time.Second)
	wg.Wait()
	if sent.Load() != workers*each {
		t.Fatalf("%d send completions, want %d", sent.Load(), workers*each)
	}
	seen := map[uint32]bool{}
	for _, w := range got {
		if w.Err() != nil || w.ByteLen != size {
			t.Fatalf("receive %+v", w)
		}
		// Each message is filled with its sender's id: the receive slot
		// (wr ID) holds one message, complete.
		m := b.buf.Bytes()[w.ID*size : w.ID*size+size]
		for _, x := range m {
			if x != m[0] {
				t.Fatalf("message in slot %d is torn", w.ID)
			}
		}
		id := uint32(m[0])
		seen[id] = true
	}
	if len(seen) != min(workers*each, 256) {
		t.Fatalf("distinct messages %d", len(seen))
	}
}

// A daemon stopped with SIGTERM tells its clients (device-fatal) and every
// call fails with ENODEV.
func TestDaemonShutdownTellsClients(t *testing.T) {
	d := startDaemon(t)
	c := d.open(t)
	if _, err := c.AllocPD(); err != nil {
		t.Fatal(err)
	}
	d.signal(syscall.SIGTERM)
	select {
	case ev, ok := <-c.AsyncEvents():
		if !ok || ev.Type != ofverbs.EventDeviceFatal {
			t.Fatalf("event %+v (open %v), want device-fatal", ev, ok)
		}
	case <-time.After(scaled(5 * time.Second)):
		t.Fatal("no device-fatal event after SIGTERM")
	}
	deadline := time.Now().Add(scaled(5 * time.Second))
	for {
		_, err := c.QueryDevice()
		if errors.Is(err, unix.ENODEV) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("QueryDevice after shutdown: %v", err)
		}
		time.Sleep(10 * time.Millisecond)
	}
}
