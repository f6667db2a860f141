package ofverbs

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/iwarpd/iwarpd/internal/shm"
	"github.com/iwarpd/iwarpd/internal/testwait"
	"github.com/iwarpd/iwarpd/proto"
	"golang.org/x/sys/unix"
)

// scaled stretches a timeout on slow machines (IWARPD_TEST_TIMEOUT_SCALE).
var scaled = testwait.Scaled

func TestOpenQueryAndList(t *testing.T) {
	d := newFakeDaemon(t)
	c := openFake(t, d)
	if c.DeviceName() != "fake0" || c.SessionID() != 7 || c.DaemonVersion() != "fake" {
		t.Fatalf("hello: %q %d %q", c.DeviceName(), c.SessionID(), c.DaemonVersion())
	}
	// The session's process memory is this process's own /proc/self/mem
	// (docs/memory-registration.md).
	d.mu.Lock()
	mem := d.helloMem
	d.mu.Unlock()
	if want := fmt.Sprintf("/proc/%d/mem", os.Getpid()); mem != want {
		t.Fatalf("hello handed over %q as process memory, want %s", mem, want)
	}
	attr, err := c.QueryDevice()
	if err != nil || attr.MaxSGE != 4 || attr.MaxInline != 64 {
		t.Fatalf("QueryDevice = %+v, %v", attr, err)
	}
	port, err := c.QueryPort()
	if err != nil || port.Addr != "127.0.0.1" || port.State != "active" {
		t.Fatalf("QueryPort = %+v, %v", port, err)
	}
	devs, err := ListDevices(WithSocket(d.sock))
	if err != nil || len(devs) != 1 || devs[0].Name != "fake0" || devs[0].Socket != d.sock || devs[0].Attr.MaxQP != 8 {
		t.Fatalf("ListDevices = %+v, %v", devs, err)
	}
	devs, err = ListDevices(WithSocket(d.sock + ".none"))
	if err != nil || len(devs) != 0 {
		t.Fatalf("ListDevices without a daemon = %+v, %v", devs, err)
	}
	if _, err := Open(WithSocket(d.sock + ".none")); !isErrno(err, unix.ENOENT) {
		t.Fatalf("Open without a daemon: %v", err)
	}
}

func TestDefaultSocketFromEnv(t *testing.T) {
	t.Setenv(EnvSocket, "/x/y.sock")
	if s := DefaultSocket(); s != "/x/y.sock" {
		t.Fatalf("DefaultSocket = %q", s)
	}
	t.Setenv(EnvSocket, "")
	t.Setenv("XDG_RUNTIME_DIR", "/run/user/1")
	want := "/run/user/1/iwarpd/iwarpd.sock"
	if unix.Geteuid() == 0 {
		want = "/run/iwarpd/iwarpd.sock"
	}
	if s := DefaultSocket(); s != want {
		t.Fatalf("DefaultSocket = %q, want %q", s, want)
	}
}

func TestErrorsKeepErrno(t *testing.T) {
	d := newFakeDaemon(t)
	d.setOverride(func(h proto.Header, body []byte) (unix.Errno, any, bool) {
		switch h.Op {
		case proto.OpAllocPD:
			return unix.ENOMEM, proto.ErrorBody{Error: "session limit of 64 PDs reached"}, true
		case proto.OpModifyQP:
			return unix.EINVAL, proto.ErrorBody{Error: "unknown QP handle 999"}, true
		}
		return 0, nil, false
	})
	c := openFake(t, d)
	_, err := c.AllocPD()
	var e *Error
	if !errors.As(err, &e) || e.Errno != unix.ENOMEM || e.Op != "alloc-pd" || !errors.Is(err, unix.ENOMEM) {
		t.Fatalf("AllocPD error = %#v", err)
	}
	if got, want := err.Error(), "ofverbs: alloc-pd: cannot allocate memory: session limit of 64 PDs reached"; got != want {
		t.Fatalf("message %q, want %q", got, want)
	}
	q := &QP{ctx: c, handle: 999}
	if err := q.Modify(QPAttr{State: QPStateInit}); !errors.Is(err, unix.EINVAL) || !strings.Contains(err.Error(), "999") {
		t.Fatalf("Modify bad handle: %v", err)
	}
	// The session goes on after error replies.
	if _, err := c.QueryDevice(); err != nil {
		t.Fatal(err)
	}
}

func TestVersionMismatch(t *testing.T) {
	d := newFakeDaemon(t)
	d.mu.Lock()
	d.helloVersion = proto.ABIVersion + 1
	d.mu.Unlock()
	_, err := Open(WithSocket(d.sock))
	var verr *proto.VersionError
	if !errors.As(err, &verr) || verr.Peer != proto.ABIVersion+1 || !errors.Is(err, unix.EPROTO) {
		t.Fatalf("version mismatch: %v", err)
	}
	if !strings.Contains(err.Error(), "ABI version mismatch") || !strings.Contains(err.Error(), "version mismatch (fake)") {
		t.Fatalf("message: %v", err)
	}
}

func TestSessionEndUnblocksEverything(t *testing.T) {
	d := newFakeDaemon(t)
	block := make(chan struct{})
	d.setOverride(func(h proto.Header, body []byte) (unix.Errno, any, bool) {
		if h.Op == proto.OpQueryPort {
			<-block // never answers: the daemon dies first
		}
		return 0, nil, false
	})
	defer close(block)
	c := openFake(t, d)
	ch, err := c.CreateCompChannel()
	if err != nil {
		t.Fatal(err)
	}
	cq, err := c.CreateCQ(4, ch)
	if err != nil {
		t.Fatal(err)
	}
	if err := cq.ReqNotify(false); err != nil {
		t.Fatal(err)
	}
	results := make(chan error, 2)
	go func() { _, err := c.QueryPort(); results <- err }()
	go func() { _, err := ch.GetEvent(); results <- err }()
	time.Sleep(50 * time.Millisecond)
	d.kill()
	for range 2 {
		select {
		case err := <-results:
			if !errors.Is(err, unix.ENODEV) {
				t.Fatalf("blocked call returned %v, want ENODEV", err)
			}
		case <-time.After(scaled(30 * time.Second)): // bounds the wait only
			t.Fatal("a blocked call did not return after the daemon died")
		}
	}
	if _, err := c.AllocPD(); !errors.Is(err, unix.ENODEV) || !strings.Contains(err.Error(), "daemon closed the session") {
		t.Fatalf("later call: %v", err)
	}
	if !errors.Is(c.Err(), unix.ENODEV) {
		t.Fatalf("Err = %v", c.Err())
	}
	ev, ok := <-c.AsyncEvents()
	if !ok || ev.Type != EventDeviceFatal {
		t.Fatalf("async event %+v %v, want device-fatal", ev, ok)
	}
	if _, ok := <-c.AsyncEvents(); ok {
		t.Fatal("event queue not closed after the session ended")
	}
	// Close after death is clean and idempotent; objects close locally.
	if err := cq.Close(); err != nil {
		t.Fatal(err)
	}
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
}

func TestAsyncEventNamesObject(t *testing.T) {
	d := newFakeDaemon(t)
	c := openFake(t, d)
	pd, _ := c.AllocPD()
	cq, err := c.CreateCQ(8, nil)
	if err != nil {
		t.Fatal(err)
	}
	qp, err := pd.CreateQP(QPInitAttr{Type: QPTypeUD, SendCQ: cq, RecvCQ: cq, Cap: QPCap{MaxSendWR: 4, MaxRecvWR: 4, MaxSendSGE: 1, MaxRecvSGE: 1}})
	if err != nil {
		t.Fatal(err)
	}
	d.event(proto.Event{Type: proto.EventQPFatal, Handle: qp.Handle(), Detail: "bad lkey"})
	d.event(proto.Event{Type: proto.EventCQError, Handle: cq.Handle()})
	for _, want := range []EventType{EventQPFatal, EventCQError} {
		select {
		case ev := <-c.AsyncEvents():
			if ev.Type != want {
				t.Fatalf("event %v, want %v", ev.Type, want)
			}
			if want == EventQPFatal && (ev.QP != qp || ev.Detail != "bad lkey") {
				t.Fatalf("QP event %+v", ev)
			}
			if want == EventCQError && ev.CQ != cq {
				t.Fatalf("CQ event %+v", ev)
			}
		case <-time.After(scaled(30 * time.Second)): // bounds the wait only
			t.Fatal("no event")
		}
	}
}

func TestRegMR(t *testing.T) {
	d := newFakeDaemon(t)
	var gotMu sync.Mutex
	var got proto.RegMRRequest
	d.setOverride(func(h proto.Header, body []byte) (unix.Errno, any, bool) {
		if h.Op == proto.OpRegMR {
			gotMu.Lock()
			defer gotMu.Unlock()
			if err := proto.Unmarshal(body, &got); err != nil {
				t.Error(err)
			}
			return 0, proto.RegMRReply{Handle: 3, LKey: 0x0377, RKey: 0x0378}, true
		}
		return 0, nil, false
	})
	c := openFake(t, d)
	pd, _ := c.AllocPD()
	buf, err := c.AllocBuffer(10000)
	if err != nil {
		t.Fatal(err)
	}
	if len(buf.Bytes()) != 10000 {
		t.Fatalf("buffer len %d", len(buf.Bytes()))
	}
	b := buf.Bytes()[100:300]
	mr, err := pd.RegMR(b, AccessLocalWrite)
	if err != nil {
		t.Fatal(err)
	}
	gotMu.Lock()
	defer gotMu.Unlock()
	if got.Offset != 100 || got.Length != 200 || got.Addr != addrOf(b) || got.Access != AccessLocalWrite || got.PD != pd.Handle() {
		t.Fatalf("request %+v", got)
	}
	if mr.LKey() != 0x0377 || mr.RKey() != 0x0378 || mr.Addr() != addrOf(b) {
		t.Fatalf("mr keys %#x %#x", mr.LKey(), mr.RKey())
	}
	sge := mr.SGE(b[10:20])
	if sge.Addr != addrOf(b)+10 || sge.Length != 10 || sge.LKey != 0x0377 {
		t.Fatalf("SGE %+v", sge)
	}
	if !mr.Contains(b[199:]) || mr.Contains(buf.Bytes()[99:101]) {
		t.Fatal("Contains")
	}
	if mr.Process() {
		t.Fatal("a Buffer's memory registered as process memory")
	}
	gotMu.Unlock()
	for name, bad := range map[string][]byte{
		"empty": buf.Bytes()[5:5],
		"nil":   nil,
	} {
		if _, err := pd.RegMR(bad, AccessLocalWrite); !errors.Is(err, unix.EINVAL) {
			t.Errorf("%s: RegMR = %v, want EINVAL", name, err)
		}
	}
	// Memory no Buffer holds is registered as process memory: no
	// descriptor, Offset 0, Process set (proto.RegMRRequest).
	heap := bytes.Repeat([]byte{1}, 4096)
	pmr, err := pd.RegMR(heap[8:72], AccessLocalWrite)
	if err != nil {
		t.Fatal(err)
	}
	gotMu.Lock()
	if !got.Process || got.Offset != 0 || got.Length != 64 || got.Addr != addrOf(heap[8:]) || !pmr.Process() {
		t.Fatalf("process-memory request %+v (MR process %v)", got, pmr.Process())
	}
	if err := mr.Close(); err != nil {
		t.Fatal(err)
	}
	if err := mr.Close(); err != nil {
		t.Fatal(err)
	}
	if err := buf.Close(); err != nil || buf.Bytes() != nil {
		t.Fatalf("buffer close: %v", err)
	}
	if err := buf.Close(); err != nil {
		t.Fatal(err)
	}
}

// fakeQP creates a QP on the fake daemon and returns the daemon's view of
// its rings.
func fakeQP(t *testing.T, c *Context, d *fakeDaemon, caps QPCap, srq *SRQ) (*QP, *CQ, *shm.Ring, *shm.Ring) {
	t.Helper()
	pd, err := c.AllocPD()
	if err != nil {
		t.Fatal(err)
	}
	cq, err := c.CreateCQ(16, nil)
	if err != nil {
		t.Fatal(err)
	}
	qp, err := pd.CreateQP(QPInitAttr{Type: QPTypeUD, SendCQ: cq, RecvCQ: cq, SRQ: srq, Cap: caps})
	if err != nil {
		t.Fatal(err)
	}
	if qp.Addr() != netip.MustParseAddrPort("127.0.0.1:27001") {
		t.Fatalf("addr %v", qp.Addr())
	}
	mem := d.region(qp.Handle()).Mem
	got := qp.Cap()
	sqStride := proto.SQEStride(got.MaxSendSGE, got.MaxInline)
	sqBytes := proto.RingBytes(got.MaxSendWR, sqStride)
	sq := daemonRing(t, mem[:sqBytes], proto.RingSQ, got.MaxSendWR, sqStride)
	var rq *shm.Ring
	if srq == nil {
		rq = daemonRing(t, mem[sqBytes:], proto.RingRQ, got.MaxRecvWR, proto.RQEStride(got.MaxRecvSGE))
	}
	return qp, cq, sq, rq
}

func TestPostSendEncoding(t *testing.T) {
	d := newFakeDaemon(t)
	c := openFake(t, d)
	qp, _, sqRing, _ := fakeQP(t, c, d, QPCap{MaxSendWR: 3, MaxRecvWR: 2, MaxSendSGE: 3, MaxRecvSGE: 2, MaxInline: 40}, nil)
	if cp := qp.Cap(); cp.MaxSendWR != 4 || cp.MaxRecvWR != 2 {
		t.Fatalf("caps not rounded: %+v", cp)
	}
	pd := qp.pd
	ah, err := pd.CreateAHTo(Endpoint{Addr: netip.MustParseAddrPort("127.0.0.1:27002"), QKey: 0x42f0e17d})
	if err != nil {
		t.Fatal(err)
	}
	buf, _ := c.AllocBuffer(4096)
	copy(buf.Bytes()[1000:], "hello, inline world")
	mr, err := pd.RegMR(buf.Bytes(), AccessLocalWrite)
	if err != nil {
		t.Fatal(err)
	}
	b := buf.Bytes()
	wrs := []SendWR{
		{ID: 1, Opcode: WRSend, SGL: []SGE{mr.SGE(b[0:10]), mr.SGE(b[100:200]), mr.SGE(b[300:301])}, Signaled: true, AH: ah},
		{ID: 2, Opcode: WRSend, Inline: true, InlineData: []byte("0123456789"), Solicited: true, AH: ah},
		{ID: 3, Opcode: WRSend, Inline: true, SGL: []SGE{mr.SGE(b[1000:1007]), mr.SGE(b[1007:1019])}, AH: ah, RemoteQKey: 0x77},
		{ID: 4, Opcode: WRRDMAWrite, SGL: []SGE{mr.SGE(b[:8])}, RKey: 0xabcd, RemoteAddr: 0x1234, Fence: true},
	}
	n, err := qp.PostSend(wrs)
	if n != 4 || err != nil {
		t.Fatalf("PostSend = %d, %v", n, err)
	}
	cons := shm.NewConsumer(sqRing)
	type want struct {
		e      proto.SQE
		sges   []proto.SGE
		inline string
	}
	wants := []want{
		{e: proto.SQE{WRID: 1, Opcode: proto.WRSend, Flags: proto.SendSignaled, NumSGE: 3, AH: ah.av, QKey: 0x42f0e17d},
			sges: []proto.SGE{{Addr: addrOf(b), Length: 10, LKey: mr.LKey()}, {Addr: addrOf(b) + 100, Length: 100, LKey: mr.LKey()}, {Addr: addrOf(b) + 300, Length: 1, LKey: mr.LKey()}}},
		{e: proto.SQE{WRID: 2, Opcode: proto.WRSend, Flags: proto.SendSolicited | proto.SendInline, InlineLen: 10, AH: ah.av, QKey: 0x42f0e17d}, inline: "0123456789"},
		{e: proto.SQE{WRID: 3, Opcode: proto.WRSend, Flags: proto.SendInline, InlineLen: 19, AH: ah.av, QKey: 0x77}, inline: "hello, inline world"},
		{e: proto.SQE{WRID: 4, Opcode: proto.WRRDMAWrite, Flags: proto.SendFence, NumSGE: 1, RKey: 0xabcd, RemoteAddr: 0x1234},
			sges: []proto.SGE{{Addr: addrOf(b), Length: 8, LKey: mr.LKey()}}},
	}
	for i, w := range wants {
		slot, err := cons.Peek()
		if err != nil || slot == nil {
			t.Fatalf("entry %d: %v %v", i, slot, err)
		}
		if got := proto.GetSQE(slot); got != w.e {
			t.Errorf("entry %d: %+v\nwant %+v", i, got, w.e)
		}
		for j, s := range w.sges {
			if got := proto.GetSGE(slot[proto.SQEHeaderLen+j*proto.SGELen:]); got != s {
				t.Errorf("entry %d SGE %d: %+v, want %+v", i, j, got, s)
			}
		}
		if w.inline != "" {
			if got := string(slot[proto.SQEHeaderLen : proto.SQEHeaderLen+len(w.inline)]); got != w.inline {
				t.Errorf("entry %d inline %q", i, got)
			}
		}
		cons.Advance()
	}
	// The ring is full: nothing more fits until the daemon consumes.
	n, err = qp.PostSend([]SendWR{{ID: 5}})
	if n != 0 || !errors.Is(err, unix.ENOMEM) {
		t.Fatalf("full SQ: %d, %v", n, err)
	}
	cons.Release() // the daemon took all four
	n, err = qp.PostSend([]SendWR{{ID: 5}, {ID: 6}, {ID: 7}, {ID: 8}, {ID: 9}})
	if n != 4 || !errors.Is(err, unix.ENOMEM) {
		t.Fatalf("partly full SQ: %d, %v", n, err)
	}
	// Capability violations stop the list at the bad request.
	cons.Advance()
	cons.Advance()
	cons.Advance()
	cons.Advance()
	cons.Release()
	bad := [][]SendWR{
		{{ID: 10}, {ID: 11, SGL: make([]SGE, 4)}},
		{{ID: 10}, {ID: 11, Inline: true, InlineData: make([]byte, 41)}},
		{{ID: 10}, {ID: 11, Inline: true, SGL: []SGE{{Addr: 8, Length: 4}}}},
	}
	for i, wrs := range bad {
		n, err := qp.PostSend(wrs)
		if n != 1 || !errors.Is(err, unix.EINVAL) {
			t.Errorf("bad list %d: %d, %v", i, n, err)
		}
		cons.Advance()
		cons.Release()
	}
}

func TestPostRecvAndSRQEncoding(t *testing.T) {
	d := newFakeDaemon(t)
	c := openFake(t, d)
	qp, _, _, rqRing := fakeQP(t, c, d, QPCap{MaxSendWR: 1, MaxRecvWR: 2, MaxSendSGE: 1, MaxRecvSGE: 2}, nil)
	wrs := []RecvWR{
		{ID: 21, SGL: []SGE{{Addr: 0x1000, Length: 64, LKey: 9}, {Addr: 0x2000, Length: 32, LKey: 9}}},
		{ID: 22, SGL: []SGE{{Addr: 0x3000, Length: 16, LKey: 10}}},
		{ID: 23},
	}
	n, err := qp.PostRecv(wrs)
	if n != 2 || !errors.Is(err, unix.ENOMEM) {
		t.Fatalf("PostRecv = %d, %v", n, err)
	}
	cons := shm.NewConsumer(rqRing)
	for i := range 2 {
		slot, _ := cons.Peek()
		if slot == nil {
			t.Fatalf("entry %d missing", i)
		}
		e := proto.GetRQE(slot)
		if e.WRID != wrs[i].ID || int(e.NumSGE) != len(wrs[i].SGL) {
			t.Fatalf("entry %d: %+v", i, e)
		}
		for j, s := range wrs[i].SGL {
			if got := proto.GetSGE(slot[proto.RQEHeaderLen+j*proto.SGELen:]); got != proto.SGE(s) {
				t.Fatalf("entry %d SGE %d: %+v", i, j, got)
			}
		}
		cons.Advance()
	}
	cons.Release()
	if n, err := qp.PostRecv([]RecvWR{{ID: 1, SGL: make([]SGE, 3)}}); n != 0 || !errors.Is(err, unix.EINVAL) {
		t.Fatalf("too many SGEs: %d, %v", n, err)
	}

	pd, _ := c.AllocPD()
	srq, err := pd.CreateSRQ(SRQInitAttr{MaxWR: 3, MaxSGE: 1})
	if err != nil {
		t.Fatal(err)
	}
	srqRing := daemonRing(t, d.region(srq.Handle()).Mem, proto.RingSRQ, 4, proto.RQEStride(1))
	qp2, _, _, _ := fakeQP(t, c, d, QPCap{MaxSendWR: 1, MaxRecvWR: 8, MaxSendSGE: 1}, srq)
	if qp2.Cap().MaxRecvWR != 0 {
		t.Fatalf("QP with SRQ has RQ caps %+v", qp2.Cap())
	}
	if _, err := qp2.PostRecv([]RecvWR{{ID: 1}}); !errors.Is(err, unix.EINVAL) {
		t.Fatalf("PostRecv on a QP with an SRQ: %v", err)
	}
	n, err = srq.PostRecv([]RecvWR{{ID: 31, SGL: []SGE{{Addr: 1, Length: 2, LKey: 3}}}, {ID: 32}})
	if n != 2 || err != nil {
		t.Fatal(n, err)
	}
	sc := shm.NewConsumer(srqRing)
	if avail, _ := sc.Available(); avail != 2 {
		t.Fatalf("SRQ entries %d", avail)
	}
	slot, _ := sc.Peek()
	if e := proto.GetRQE(slot); e.WRID != 31 || e.NumSGE != 1 {
		t.Fatalf("SRQ entry %+v", e)
	}
	if err := srq.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := srq.PostRecv([]RecvWR{{ID: 1}}); !errors.Is(err, unix.EINVAL) {
		t.Fatalf("post to closed SRQ: %v", err)
	}
}

func TestDoorbellOnlyWhenAsleep(t *testing.T) {
	d := newFakeDaemon(t)
	c := openFake(t, d)
	qp, _, _, _ := fakeQP(t, c, d, QPCap{MaxSendWR: 8, MaxRecvWR: 8, MaxSendSGE: 1, MaxRecvSGE: 1}, nil)
	d.asleep.Store(0)
	qp.PostSend([]SendWR{{ID: 1}, {ID: 2}})
	qp.PostRecv([]RecvWR{{ID: 1}})
	if v, _ := d.doorbell.Drain(); v != 0 {
		t.Fatalf("doorbell rung %d times while the engine polls", v)
	}
	d.asleep.Store(1)
	qp.PostSend([]SendWR{{ID: 3}, {ID: 4}, {ID: 5}})
	if v, _ := d.doorbell.Drain(); v != 1 {
		t.Fatalf("doorbell rung %d times for one batch, want 1", v)
	}
	qp.PostRecv([]RecvWR{{ID: 2}})
	if v, _ := d.doorbell.Drain(); v != 1 {
		t.Fatalf("doorbell after PostRecv: %d", v)
	}
	qp.PostSend(nil) // nothing posted, nothing rung
	if v, _ := d.doorbell.Drain(); v != 0 {
		t.Fatalf("doorbell for an empty post: %d", v)
	}
}

// putCQE produces one completion as the daemon would.
func putCQE(t testing.TB, p *shm.Producer, e *proto.CQE) {
	slot, err := p.Next()
	if err != nil || slot == nil {
		t.Fatalf("CQ ring: %v %v", slot, err)
	}
	e.Put(slot)
	p.Publish()
}

func TestPollDecodes(t *testing.T) {
	d := newFakeDaemon(t)
	c := openFake(t, d)
	cq, err := c.CreateCQ(5, nil)
	if err != nil || cq.Depth() != 8 {
		t.Fatalf("CreateCQ: %v depth %d", err, cq.Depth())
	}
	ring := daemonRing(t, d.region(cq.Handle()).Mem, proto.RingCQ, 8, proto.CQESize)
	p := shm.NewProducer(ring)
	src := netip.MustParseAddrPort("127.0.0.1:27005")
	in := []proto.CQE{
		{WRID: 1, Status: proto.WCSuccess, Opcode: proto.WCRecv, Flags: proto.WCFlagSrcValid | proto.WCFlagSolicited, ByteLen: 1000, QPN: 3, Src: src},
		{WRID: 2, Status: proto.WCSuccess, Opcode: proto.WCSend, ByteLen: 12, QPN: 3},
		{WRID: 3, Status: proto.WCLocProtErr, Opcode: proto.WCSend, QPN: 3, Flags: proto.WCFlagTermValid, Term: 0x010203},
	}
	for i := range in {
		putCQE(t, p, &in[i])
	}
	wcs := make([]WC, 2)
	n, err := cq.Poll(wcs)
	if n != 2 || err != nil {
		t.Fatalf("Poll = %d, %v", n, err)
	}
	if w := wcs[0]; w.ID != 1 || w.Opcode != WCRecv || w.ByteLen != 1000 || w.Src != src || !w.Solicited() || w.Err() != nil {
		t.Fatalf("wc 0 = %+v", w)
	}
	if w := wcs[1]; w.ID != 2 || w.Opcode != WCSend || w.ByteLen != 12 || w.Src.IsValid() && w.Src.Port() != 0 {
		t.Fatalf("wc 1 = %+v", w)
	}
	n, err = cq.Poll(wcs)
	if n != 1 || err != nil {
		t.Fatalf("Poll = %d, %v", n, err)
	}
	werr := wcs[0].Err()
	var we *WCError
	if !errors.As(werr, &we) || we.Status != WCLocProtErr || we.ID != 3 || !strings.Contains(werr.Error(), "local protection error") {
		t.Fatalf("WC error %v", werr)
	}
	if WCWRFlushErr.String() != "work request flushed" {
		t.Fatal(WCWRFlushErr.String())
	}
	if n, err := cq.Poll(wcs); n != 0 || err != nil {
		t.Fatalf("empty Poll = %d, %v", n, err)
	}
	// The consumer index went back to the daemon.
	if free := p.Free(); free != 8 {
		t.Fatalf("ring free %d after polling everything", free)
	}
	// A hostile producer index is reported, not followed.
	binary.LittleEndian.PutUint32(ring.Bytes()[proto.OffRingProducer:], 1000)
	if _, err := cq.Poll(wcs); !errors.Is(err, unix.EIO) {
		t.Fatalf("corrupt ring: %v", err)
	}
}

func TestPollAndPostDoNotAllocate(t *testing.T) {
	d := newFakeDaemon(t)
	c := openFake(t, d)
	qp, cq, sqRing, rqRing := fakeQP(t, c, d, QPCap{MaxSendWR: 4, MaxRecvWR: 4, MaxSendSGE: 2, MaxRecvSGE: 2, MaxInline: 16}, nil)
	ring := daemonRing(t, d.region(cq.Handle()).Mem, proto.RingCQ, 16, proto.CQESize)
	p := shm.NewProducer(ring)
	sqc, rqc := shm.NewConsumer(sqRing), shm.NewConsumer(rqRing)
	cqe := proto.CQE{WRID: 9, Opcode: proto.WCRecv, Flags: proto.WCFlagSrcValid, Src: netip.MustParseAddrPort("[::1]:5"), ByteLen: 3}
	wcs := make([]WC, 4)
	send := []SendWR{{ID: 1, SGL: []SGE{{Addr: 1, Length: 2, LKey: 3}, {Addr: 4, Length: 5, LKey: 6}}, Signaled: true},
		{ID: 2, Inline: true, InlineData: []byte("abc")}}
	recv := []RecvWR{{ID: 3, SGL: []SGE{{Addr: 1, Length: 2, LKey: 3}}}}
	allocs := testing.AllocsPerRun(200, func() {
		putCQE(t, p, &cqe)
		putCQE(t, p, &cqe)
		if n, err := cq.Poll(wcs); n != 2 || err != nil {
			t.Fatalf("Poll = %d, %v", n, err)
		}
		if n, err := qp.PostSend(send); n != 2 || err != nil {
			t.Fatalf("PostSend = %d, %v", n, err)
		}
		if n, err := qp.PostRecv(recv); n != 1 || err != nil {
			t.Fatalf("PostRecv = %d, %v", n, err)
		}
		for range 2 {
			sqc.Advance()
		}
		sqc.Release()
		rqc.Advance()
		rqc.Release()
	})
	if allocs != 0 {
		t.Fatalf("Poll/PostSend/PostRecv allocate %.1f times per run", allocs)
	}
	if wcs[1].Src != netip.MustParseAddrPort("[::1]:5") || wcs[1].ID != 9 {
		t.Fatalf("wc %+v", wcs[1])
	}
}

func TestCompletionChannel(t *testing.T) {
	d := newFakeDaemon(t)
	c := openFake(t, d)
	ch, err := c.CreateCompChannel()
	if err != nil {
		t.Fatal(err)
	}
	cq1, err := c.CreateCQ(4, ch)
	if err != nil {
		t.Fatal(err)
	}
	cq2, err := c.CreateCQ(4, ch)
	if err != nil {
		t.Fatal(err)
	}
	plain, _ := c.CreateCQ(4, nil)
	if err := plain.ReqNotify(false); !errors.Is(err, unix.EINVAL) {
		t.Fatalf("ReqNotify without channel: %v", err)
	}
	arm1 := daemonRing(t, d.region(cq1.Handle()).Mem, proto.RingCQ, 4, proto.CQESize).Arm()
	arm2 := daemonRing(t, d.region(cq2.Handle()).Mem, proto.RingCQ, 4, proto.CQESize).Arm()
	efd := d.channel(ch.handle)

	if err := cq1.ReqNotify(true); err != nil {
		t.Fatal(err)
	}
	if v := arm1.Load(); v != proto.ArmSolicited {
		t.Fatalf("arm word %d, want ArmSolicited", v)
	}
	if _, err := ch.GetEventTimeout(30 * time.Millisecond); !errors.Is(err, unix.ETIMEDOUT) {
		t.Fatalf("GetEvent with nothing: %v", err)
	}
	// The daemon fires cq1 (as verbsd: CAS the arm word, then signal).
	if !arm1.CompareAndSwap(proto.ArmSolicited, proto.ArmNone) {
		t.Fatal("CAS")
	}
	efd.Signal()
	got, err := ch.GetEventTimeout(5 * time.Second)
	if err != nil || got != cq1 {
		t.Fatalf("GetEvent = %v, %v", got, err)
	}
	if got.UnackedEvents() != 1 {
		t.Fatal("unacked")
	}
	got.AckEvents(1)
	if got.UnackedEvents() != 0 {
		t.Fatal("acked")
	}
	// Disarmed now: a signal without a re-arm is not an event.
	efd.Signal()
	if _, err := ch.GetEventTimeout(30 * time.Millisecond); !errors.Is(err, unix.ETIMEDOUT) {
		t.Fatalf("spurious event: %v", err)
	}
	// Both CQs fire under one eventfd count: two events.
	cq1.ReqNotify(false)
	cq2.ReqNotify(false)
	if arm1.Load() != proto.ArmNext || arm2.Load() != proto.ArmNext {
		t.Fatal("arm words")
	}
	arm1.Store(proto.ArmNone)
	arm2.Store(proto.ArmNone)
	efd.Signal()
	efd.Signal()
	seen := map[*CQ]bool{}
	for range 2 {
		got, err := ch.GetEventTimeout(5 * time.Second)
		if err != nil {
			t.Fatal(err)
		}
		seen[got] = true
	}
	if !seen[cq1] || !seen[cq2] {
		t.Fatalf("events for %v", seen)
	}
	// An event that fired before a re-arm is not lost.
	cq1.ReqNotify(false)
	arm1.Store(proto.ArmNone)
	efd.Signal()
	cq1.ReqNotify(false)
	if got, err := ch.GetEventTimeout(5 * time.Second); err != nil || got != cq1 {
		t.Fatalf("event before re-arm: %v %v", got, err)
	}
	// A blocked GetEvent returns when the channel is closed.
	errc := make(chan error, 1)
	go func() { _, err := ch.GetEvent(); errc <- err }()
	time.Sleep(20 * time.Millisecond)
	for _, cq := range []*CQ{cq1, cq2} {
		if err := cq.Close(); err != nil {
			t.Fatal(err)
		}
	}
	if err := ch.Close(); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-errc:
		if !errors.Is(err, unix.EINVAL) {
			t.Fatalf("GetEvent on closed channel: %v", err)
		}
	case <-time.After(scaled(30 * time.Second)): // bounds the wait only
		t.Fatal("GetEvent did not return after Close")
	}
}

func TestContextCloseReleasesEverything(t *testing.T) {
	d := newFakeDaemon(t)
	c := openFake(t, d)
	qp, cq, _, _ := fakeQP(t, c, d, QPCap{MaxSendWR: 2, MaxRecvWR: 2, MaxSendSGE: 1, MaxRecvSGE: 1}, nil)
	buf, _ := c.AllocBuffer(100)
	ch, _ := c.CreateCompChannel()
	errc := make(chan error, 1)
	go func() { _, err := ch.GetEvent(); errc <- err }()
	time.Sleep(20 * time.Millisecond)
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-errc:
		if !errors.Is(err, unix.ENODEV) {
			t.Fatalf("GetEvent after context Close: %v", err)
		}
	case <-time.After(scaled(30 * time.Second)): // bounds the wait only
		t.Fatal("GetEvent did not return after context Close")
	}
	if _, err := cq.Poll(make([]WC, 1)); !errors.Is(err, unix.EINVAL) {
		t.Fatalf("Poll after Close: %v", err)
	}
	if _, err := qp.PostSend([]SendWR{{ID: 1}}); !errors.Is(err, unix.EINVAL) {
		t.Fatalf("PostSend after Close: %v", err)
	}
	if buf.Bytes() != nil {
		t.Fatal("buffer still mapped")
	}
	for _, f := range []func() error{qp.Close, cq.Close, ch.Close, buf.Close, c.Close} {
		if err := f(); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := c.AllocPD(); !errors.Is(err, unix.ENODEV) {
		t.Fatalf("AllocPD after Close: %v", err)
	}
}

func TestObjectCloseSendsDestroy(t *testing.T) {
	d := newFakeDaemon(t)
	var busy atomic.Bool
	busy.Store(true)
	d.setOverride(func(h proto.Header, body []byte) (unix.Errno, any, bool) {
		if h.Op == proto.OpDeallocPD && busy.Load() {
			return unix.EBUSY, proto.ErrorBody{Error: "PD has 1 QP"}, true
		}
		return 0, nil, false
	})
	c := openFake(t, d)
	pd, _ := c.AllocPD()
	if err := pd.Close(); !errors.Is(err, unix.EBUSY) {
		t.Fatalf("busy PD: %v", err)
	}
	busy.Store(false)
	if err := pd.Close(); err != nil {
		t.Fatal(err)
	}
	if err := pd.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := pd.CreateQP(QPInitAttr{}); !errors.Is(err, unix.EINVAL) {
		t.Fatalf("CreateQP on closed PD: %v", err)
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	count := 0
	for _, h := range d.reqs {
		if h.Op == proto.OpDeallocPD {
			count++
		}
	}
	if count != 2 {
		t.Fatalf("dealloc-pd sent %d times, want 2 (the idempotent third Close sends nothing)", count)
	}
}
