package e2e

import (
	"encoding/binary"
	"errors"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/iwarpd/iwarpd/verbsd/config"

	"github.com/iwarpd/iwarpd/internal/eventfd"
	"github.com/iwarpd/iwarpd/internal/shm"
	"github.com/iwarpd/iwarpd/proto"
	"github.com/iwarpd/iwarpd/verbsd/verbsdtest"
	"golang.org/x/sys/unix"
)

func createSRQ(t testing.TB, c *verbsdtest.Client, pd, depth, maxSGE uint32) (uint32, *shm.Producer) {
	t.Helper()
	reg := must(shm.Create("srq", proto.RingBytes(depth, proto.RQEStride(maxSGE))))(t)
	t.Cleanup(func() { reg.Close() })
	ring := must(shm.NewRing(reg.Mem, proto.RingSRQ, depth, proto.RQEStride(maxSGE), true))(t)
	var h proto.Handle
	if _, err := c.Call(proto.OpCreateSRQ, proto.CreateSRQRequest{PD: pd, MaxWR: depth, MaxSGE: maxSGE}, &h, reg.FD()); err != nil {
		t.Fatal(err)
	}
	return h.Handle, shm.NewProducer(ring)
}

func TestHelloQueryAndVersionMismatch(t *testing.T) {
	srv, path := startServer(t, nil)
	c := dial(t, path)
	var attr proto.DeviceAttr
	if _, err := c.Call(proto.OpQueryDevice, nil, &attr); err != nil {
		t.Fatal(err)
	}
	cfg := srv.Config()
	if attr != cfg.DeviceAttr() || attr.MaxSGE != 60 || attr.MaxInline != 256 || attr.MaxMsgUD != 1<<20 {
		t.Fatalf("device attr %+v", attr)
	}
	var port proto.PortAttr
	if _, err := c.Call(proto.OpQueryPort, nil, &port); err != nil || port.Addr != "127.0.0.1" || port.State != "active" {
		t.Fatalf("port attr %+v %v", port, err)
	}
	if c.Hello.ABI != proto.ABIVersion || c.Hello.SessionID == 0 || c.Hello.Device != "iwarpd0" {
		t.Fatalf("hello %+v", c.Hello)
	}
	// A second hello is refused.
	_, err := c.Call(proto.OpHello, proto.HelloRequest{ABI: proto.ABIVersion}, nil)
	wantErrno(t, "second hello", err, unix.EINVAL)

	for _, tc := range []struct {
		name    string
		version uint16
		abi     uint16
	}{{"header", proto.ABIVersion + 1, proto.ABIVersion}, {"body", proto.ABIVersion, proto.ABIVersion + 7}} {
		conn := must(proto.Dial(path))(t)
		h, body, _, err := (&verbsdtest.Client{Conn: conn}).Raw(proto.Header{Version: tc.version, Op: proto.OpHello, Seq: 9},
			proto.HelloRequest{ABI: tc.abi})
		if err != nil {
			t.Fatal(err)
		}
		var eb proto.ErrorBody
		proto.Unmarshal(body, &eb)
		if h.Status != unix.EPROTO || h.Version != proto.ABIVersion || h.Seq != 9 || !strings.Contains(eb.Error, "ABI version mismatch") {
			t.Errorf("%s mismatch: reply %+v %q", tc.name, h, eb.Error)
		}
		conn.UnixConn().SetReadDeadline(time.Now().Add(wait()))
		if _, _, _, err := conn.Receive(); err == nil {
			t.Errorf("%s mismatch: connection not closed", tc.name)
		}
		conn.Close()
	}
}

func TestMalformedControlMessages(t *testing.T) {
	_, path := startServer(t, nil)
	c := dial(t, path)
	hdr := func(op proto.Op) []byte {
		return proto.Header{Version: proto.ABIVersion, Op: op, Seq: 3}.Append(nil)
	}
	cases := map[string][]byte{
		"short":          {1, 2, 3},
		"bad magic":      make([]byte, 32),
		"unknown op":     hdr(999),
		"reply op":       hdr(proto.OpAllocPD | proto.OpReply),
		"event op":       hdr(proto.OpEvent),
		"bad json":       append(hdr(proto.OpDeallocPD), "{nope"...),
		"unknown field":  append(hdr(proto.OpDeallocPD), `{"handle":1,"x":2}`...),
		"trailing":       append(hdr(proto.OpDeallocPD), `{"handle":1} {}`...),
		"wrong type":     append(hdr(proto.OpCreateCQ), `{"depth":"x"}`...),
		"no fd":          append(hdr(proto.OpCreateCQ), `{"depth":8}`...),
		"no fd for qp":   append(hdr(proto.OpCreateQP), `{"type":2,"caps":{"max_send_wr":8,"max_recv_wr":8}}`...),
		"zero-length mr": append(hdr(proto.OpRegMR), `{"pd":1,"length":0}`...),
		"bad access":     append(hdr(proto.OpRegMR), `{"pd":1,"length":10,"access":64}`...),
	}
	for name, msg := range cases {
		h, _, fds, err := c.RawBytes(msg)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if len(fds) != 0 || h.Status != unix.EINVAL || h.Op&proto.OpReply == 0 {
			t.Errorf("%s: reply %+v, want EINVAL", name, h)
		}
	}
	// A request carrying descriptors it does not need has them closed, and
	// still gets its answer.
	efd := must(eventfd.New(false))(t)
	defer efd.Close()
	if _, err := c.Call(proto.OpAllocPD, nil, nil, efd.FD(), efd.FD()); err != nil {
		t.Fatal(err)
	}
	// A memfd that is not sealed is refused.
	fd := must(unix.MemfdCreate("unsealed", unix.MFD_CLOEXEC))(t)
	unix.Ftruncate(fd, 1<<16)
	_, err := c.Call(proto.OpCreateCQ, proto.CreateCQRequest{Depth: 8}, nil, fd)
	wantErrno(t, "unsealed CQ region", err, unix.EINVAL)
	unix.Close(fd)
	// A CQ region whose ring header was never initialized is refused.
	reg := must(shm.Create("cq", proto.RingBytes(8, proto.CQESize)))(t)
	_, err = c.Call(proto.OpCreateCQ, proto.CreateCQRequest{Depth: 8}, nil, reg.FD())
	wantErrno(t, "uninitialized ring", err, unix.EINVAL)
	reg.Close()
	// The daemon is alive and the session usable.
	if _, err := c.AllocPD(); err != nil {
		t.Fatal(err)
	}
}

func TestLimitsAndObjectRules(t *testing.T) {
	_, path := startServer(t, func(c *config.Config) {
		c.Limits.MaxQP = 2
		c.Limits.MaxRegistered = 1 << 20
		c.Limits.MaxPD = 3
	})
	c := dial(t, path)
	pd := must(c.AllocPD())(t)
	cq := must(c.CreateCQ(64, 0))(t)
	for range 2 {
		must(c.CreateQP(pd, cq, cq, defaultCaps, verbsdtest.QPOptions{}))(t)
	}
	_, err := c.CreateQP(pd, cq, cq, defaultCaps, verbsdtest.QPOptions{})
	wantErrno(t, "third QP", err, unix.ENOMEM)
	must(c.RegMR(pd, 1<<19, proto.AccessLocalWrite))(t)
	_, err = c.RegMR(pd, 1<<19+4096, proto.AccessLocalWrite)
	wantErrno(t, "registered bytes", err, unix.ENOMEM)
	must(c.AllocPD())(t)
	must(c.AllocPD())(t)
	_, err = c.AllocPD()
	wantErrno(t, "fourth PD", err, unix.ENOMEM)

	big := defaultCaps
	big.MaxSendWR = 1 << 15
	_, err = c.CreateQP(pd, cq, cq, big, verbsdtest.QPOptions{})
	wantErrno(t, "deep SQ", err, unix.EINVAL)
	big = defaultCaps
	big.MaxSendSGE = 61
	_, err = c.CreateQP(pd, cq, cq, big, verbsdtest.QPOptions{})
	wantErrno(t, "61 SGEs", err, unix.EINVAL)
	_, err = c.Call(proto.OpCreateQP, proto.CreateQPRequest{PD: pd, Type: proto.QPTypeRD, Caps: defaultCaps}, nil)
	wantErrno(t, "RD QP", err, unix.EOPNOTSUPP)
	_, err = c.Call(proto.OpDeallocPD, proto.Handle{Handle: pd}, nil)
	wantErrno(t, "dealloc busy PD", err, unix.EBUSY)
	_, err = c.Call(proto.OpDestroyCQ, proto.Handle{Handle: cq.Handle}, nil)
	wantErrno(t, "destroy busy CQ", err, unix.EBUSY)
	_, err = c.Call(proto.OpDestroyQP, proto.Handle{Handle: 9999}, nil)
	wantErrno(t, "unknown QP", err, unix.EINVAL)
	_, err = c.Call(proto.OpModifyQP, proto.ModifyQPRequest{QP: 9999, State: proto.QPStateInit}, nil)
	wantErrno(t, "modify unknown QP", err, unix.EINVAL)

	// An inspect session may not do verbs.
	ic, err := verbsdtest.Dial(path, true)
	if err != nil {
		t.Fatal(err)
	}
	defer ic.Close()
	_, err = ic.AllocPD()
	wantErrno(t, "inspect session alloc-pd", err, unix.EPERM)
}

func TestQPStateMachineAndPorts(t *testing.T) {
	srv, path := startServer(t, nil)
	c := dial(t, path)
	pd := must(c.AllocPD())(t)
	cq := must(c.CreateCQ(64, 0))(t)
	port := srv.Config().UDPorts.First + 7
	q := must(c.CreateQP(pd, cq, cq, defaultCaps, verbsdtest.QPOptions{Port: port}))(t)
	if addrOf(t, q.Addr).Port() != port {
		t.Fatalf("QP address %s, want port %d", q.Addr, port)
	}
	_, err := c.CreateQP(pd, cq, cq, defaultCaps, verbsdtest.QPOptions{Port: port})
	wantErrno(t, "port in use", err, unix.EADDRINUSE)
	wantErrno(t, "RESET→RTS", q.Modify(proto.QPStateRTS), unix.EINVAL)
	if err := q.ToRTS(); err != nil {
		t.Fatal(err)
	}
	var qr proto.QueryQPReply
	if _, err := c.Call(proto.OpQueryQP, proto.Handle{Handle: q.Handle}, &qr); err != nil || qr.State != proto.QPStateRTS || qr.Addr != q.Addr {
		t.Fatalf("query-qp %+v %v", qr, err)
	}
	if err := q.Modify(proto.QPStateError); err != nil {
		t.Fatal(err)
	}
	if err := q.Modify(proto.QPStateReset); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Call(proto.OpDestroyQP, proto.Handle{Handle: q.Handle}, nil); err != nil {
		t.Fatal(err)
	}
	// The port is free again.
	must(c.CreateQP(pd, cq, cq, defaultCaps, verbsdtest.QPOptions{Port: port}))(t)
}

// TestNamedPortsOutsideRanges: a UD or RD QP may name any port its client
// could bind itself, inside its type's range or not (the ranges are the
// pools of port 0); only the other type's pool is refused (issue 19: fabtests
// servers bind 9228, outside both default ranges).
func TestNamedPortsOutsideRanges(t *testing.T) {
	srv, path := startServer(t, func(c *config.Config) {
		c.RDPorts.First, c.RDPorts.Last = c.UDPorts.Last+1, c.UDPorts.Last+50
	})
	c := dial(t, path)
	pd := must(c.AllocPD())(t)
	cq := must(c.CreateCQ(64, 0))(t)
	for _, typ := range []proto.QPType{proto.QPTypeUD, proto.QPTypeRD} {
		port := freeUDPPort(t)
		q := must(c.CreateQP(pd, cq, cq, defaultCaps, verbsdtest.QPOptions{Type: typ, Port: port}))(t)
		if addrOf(t, q.Addr).Port() != port {
			t.Fatalf("type %d: QP address %s, want port %d", typ, q.Addr, port)
		}
	}
	cfg := srv.Config()
	_, err := c.CreateQP(pd, cq, cq, defaultCaps, verbsdtest.QPOptions{Port: cfg.RDPorts.First + 3})
	wantErrno(t, "UD QP on a port of the RD range", err, unix.EINVAL)
	_, err = c.CreateQP(pd, cq, cq, defaultCaps, verbsdtest.QPOptions{Type: proto.QPTypeRD, Port: cfg.UDPorts.First + 3})
	wantErrno(t, "RD QP on a port of the UD range", err, unix.EINVAL)
}

// freeUDPPort is a UDP port of 127.0.0.1 the kernel found free a moment ago.
func freeUDPPort(t *testing.T) uint16 {
	t.Helper()
	l, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return uint16(l.LocalAddr().(*net.UDPAddr).Port)
}

func TestHandlesAreSessionLocal(t *testing.T) {
	_, path := startServer(t, nil)
	a := newNode(t, path, 4096, verbsdtest.QPOptions{})
	b := newNode(t, path, 4096, verbsdtest.QPOptions{})
	// b's handles mean nothing in a's session (both sessions number their
	// objects from 1, so use handles only b has).
	extra := must(b.c.AllocPD())(t)
	_, err := a.c.Call(proto.OpDeallocPD, proto.Handle{Handle: extra}, nil)
	wantErrno(t, "foreign PD", err, unix.EINVAL)
	// b's lkey in a's send fails with a protection error.
	ah := a.ah(t, b)
	e := proto.SQE{WRID: 77, Opcode: proto.WRSend, Flags: proto.SendSignaled, AH: ah}
	if err := a.qp.PostSend(e, []proto.SGE{b.mr.SGE(0, 16)}, nil); err != nil {
		t.Fatal(err)
	}
	got := waitCQEs(t, a.scq, 1, "send with foreign lkey")[0]
	if got.Status != proto.WCLocProtErr || got.WRID != 77 {
		t.Fatalf("foreign lkey: %+v", got)
	}
}

func TestCompletionChannelAndOverrun(t *testing.T) {
	_, path := startServer(t, nil)
	c := dial(t, path)
	efd := must(eventfd.New(false))(t)
	defer efd.Close()
	var ch proto.Handle
	if _, err := c.Call(proto.OpCreateCompChannel, proto.CreateCompChannelRequest{}, &ch, efd.FD()); err != nil {
		t.Fatal(err)
	}
	// A pipe is not an eventfd.
	var p [2]int
	unix.Pipe2(p[:], unix.O_CLOEXEC)
	_, err := c.Call(proto.OpCreateCompChannel, proto.CreateCompChannelRequest{}, nil, p[1])
	wantErrno(t, "pipe as channel", err, unix.EINVAL)
	unix.Close(p[0])
	unix.Close(p[1])

	n := &node{c: c}
	n.pd = must(c.AllocPD())(t)
	n.mr = must(c.RegMR(n.pd, 4096, proto.AccessLocalWrite))(t)
	n.scq = must(c.CreateCQ(2, ch.Handle))(t)
	n.rcq = n.scq
	n.qp = must(c.CreateQP(n.pd, n.scq, n.scq, defaultCaps, verbsdtest.QPOptions{}))(t)
	if err := n.qp.ToRTS(); err != nil {
		t.Fatal(err)
	}
	_, err = c.Call(proto.OpDestroyCompChannel, ch, nil)
	wantErrno(t, "destroy busy channel", err, unix.EBUSY)
	ah := n.ah(t, n) // loop back to itself
	n.scq.Ring.Arm().Store(proto.ArmNext)
	n.send(t, ah, 1, proto.SendSignaled, 0, 10)
	got, err := efd.Drain() // blocking read: the channel was signalled
	if err != nil || got != 1 {
		t.Fatalf("channel eventfd: %d %v", got, err)
	}
	if n.scq.Ring.Arm().Load() != proto.ArmNone {
		t.Fatal("arm word not cleared")
	}
	waitCQEs(t, n.scq, 1, "send")
	// Overrun: a 2-deep CQ and 3 signalled sends nobody polls.
	for i := range 3 {
		n.send(t, ah, uint64(10+i), proto.SendSignaled, 0, 10)
	}
	deadline := time.Now().Add(wait())
	for n.scq.Ring.Overrun().Load() == 0 && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
	if n.scq.Ring.Overrun().Load() != 1 {
		t.Fatal("CQ overrun not flagged")
	}
	// The events arrive with the next reply.
	c.AllocPD()
	var sawCQ, sawQP bool
	for _, ev := range c.Events {
		sawCQ = sawCQ || (ev.Type == proto.EventCQError && ev.Handle == n.scq.Handle)
		sawQP = sawQP || (ev.Type == proto.EventQPFatal && ev.Handle == n.qp.Handle)
	}
	if !sawCQ || !sawQP {
		t.Fatalf("events %+v: want cq-error and qp-fatal", c.Events)
	}
}

func TestIdleEngineSleeps(t *testing.T) {
	_, path := startServer(t, nil)
	c := dial(t, path)
	deadline := time.Now().Add(wait())
	for c.Asleep() != 1 {
		if time.Now().After(deadline) {
			t.Fatal("engine never went to sleep")
		}
		time.Sleep(time.Millisecond)
	}
	magic := binary.LittleEndian.Uint32(c.Status.Mem[proto.OffStatusMagic:])
	if magic != proto.StatusMagic {
		t.Fatalf("status magic %#x", magic)
	}
	// The status page cannot be mapped writable by a client.
	if _, err := unix.Mmap(c.Status.FD(), 0, proto.StatusPageLen, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED); err == nil {
		t.Fatal("status page mapped writable")
	}
	// A control request wakes it; it sleeps again afterwards.
	must(c.AllocPD())(t)
	for c.Asleep() != 1 {
		if time.Now().After(deadline) {
			t.Fatal("engine did not go back to sleep")
		}
		time.Sleep(time.Millisecond)
	}
}

func TestShutdownNotifiesClients(t *testing.T) {
	srv, path := startServer(t, nil)
	c := dial(t, path)
	must(c.AllocPD())(t)
	done := make(chan struct{})
	go func() { srv.Close(); close(done) }()
	c.Conn.UnixConn().SetReadDeadline(time.Now().Add(wait()))
	h, body, _, err := c.Conn.Receive()
	if err != nil || h.Op != proto.OpEvent {
		t.Fatalf("want an event, got %+v %v", h, err)
	}
	var ev proto.Event
	if err := proto.Unmarshal(body, &ev); err != nil || ev.Type != proto.EventDeviceFatal {
		t.Fatalf("event %+v %v", ev, err)
	}
	if _, _, _, err := c.Conn.Receive(); err == nil {
		t.Fatal("connection still open after device-fatal")
	}
	select {
	case <-done:
	case <-time.After(wait()):
		t.Fatal("Close hangs")
	}
	if _, err := proto.Dial(path); err == nil {
		t.Fatal("closed server still accepts")
	}
	_ = errors.New
}

// TestRetiredAHRequests: the create-ah and destroy-ah requests of ABI 1
// (ops 16, 17) are gone: an address handle is the client's (ud/dest.go).
func TestRetiredAHRequests(t *testing.T) {
	_, path := startServer(t, nil)
	c := dial(t, path)
	pd := must(c.AllocPD())(t)
	for _, op := range []proto.Op{16, 17} {
		_, err := c.Call(op, map[string]any{"pd": pd, "addr": "127.0.0.1:17000", "handle": 1}, nil)
		wantErrno(t, op.String(), err, unix.EINVAL)
	}
	if s := proto.Op(16).String(); s != "op(16)" {
		t.Errorf("op 16 is named %q", s)
	}
}
