package ofverbs

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"unsafe"

	"github.com/iwarpd/iwarpd/internal/eventfd"
	"github.com/iwarpd/iwarpd/internal/shm"
	"github.com/iwarpd/iwarpd/proto"
	"golang.org/x/sys/unix"
)

// fakeDaemon is an in-process stand-in for verbsd that speaks the control
// protocol and maps the regions a client passes, so that unit tests can
// check the client's side of the contract (and play the engine on the
// rings) without a real daemon.
type fakeDaemon struct {
	t        *testing.T
	sock     string
	l        *net.UnixListener
	status   *shm.Region
	asleep   *atomic.Uint32
	doorbell *eventfd.EventFD

	mu      sync.Mutex
	next    uint32
	regions map[uint32]*shm.Region // handle → mapped region (CQ, QP, SRQ)
	chans   map[uint32]*eventfd.EventFD
	conns   []*proto.Conn
	reqs    []proto.Header
	// override answers a request instead of the defaults when it returns
	// handled.
	override func(h proto.Header, body []byte) (status unix.Errno, reply any, handled bool)
	// helloVersion, if not 0, is the header version of the hello reply.
	helloVersion uint16
	// helloMem says what the last non-inspect hello handed over as its
	// process memory (HelloRequest.ProcessMem): "" for nothing, else the
	// descriptor's target (/proc/PID/mem).
	helloMem string
}

func newFakeDaemon(t *testing.T) *fakeDaemon {
	t.Helper()
	sock := filepath.Join(t.TempDir(), "fake.sock")
	l, err := net.ListenUnix("unixpacket", &net.UnixAddr{Name: sock, Net: "unixpacket"})
	if err != nil {
		t.Fatal(err)
	}
	st, err := shm.Create("status", proto.StatusPageLen)
	if err != nil {
		t.Fatal(err)
	}
	binary.LittleEndian.PutUint32(st.Mem[proto.OffStatusMagic:], proto.StatusMagic)
	binary.LittleEndian.PutUint16(st.Mem[proto.OffStatusVer:], proto.ABIVersion)
	db, err := eventfd.New(true)
	if err != nil {
		t.Fatal(err)
	}
	d := &fakeDaemon{t: t, sock: sock, l: l, status: st, doorbell: db,
		asleep:  (*atomic.Uint32)(unsafe.Pointer(&st.Mem[proto.OffStatusAsleep])),
		regions: map[uint32]*shm.Region{}, chans: map[uint32]*eventfd.EventFD{}}
	done := make(chan struct{})
	go d.accept(done)
	t.Cleanup(func() {
		l.Close()
		<-done
		d.kill()
		d.mu.Lock()
		for _, r := range d.regions {
			r.Close()
		}
		for _, e := range d.chans {
			e.Close()
		}
		d.mu.Unlock()
		st.Close()
		db.Close()
	})
	return d
}

func (d *fakeDaemon) accept(done chan struct{}) {
	defer close(done)
	for {
		uc, err := d.l.AcceptUnix()
		if err != nil {
			return
		}
		c := proto.NewConn(uc)
		d.mu.Lock()
		d.conns = append(d.conns, c)
		d.mu.Unlock()
		go d.serve(c)
	}
}

// kill closes every session, as a dying daemon's kernel would.
func (d *fakeDaemon) kill() {
	d.mu.Lock()
	defer d.mu.Unlock()
	for _, c := range d.conns {
		c.Close()
	}
	d.conns = nil
}

// event sends an event to every session.
func (d *fakeDaemon) event(ev proto.Event) {
	d.mu.Lock()
	defer d.mu.Unlock()
	for _, c := range d.conns {
		c.Send(proto.Header{Version: proto.ABIVersion, Op: proto.OpEvent}, ev)
	}
}

func (d *fakeDaemon) setOverride(f func(h proto.Header, body []byte) (unix.Errno, any, bool)) {
	d.mu.Lock()
	d.override = f
	d.mu.Unlock()
}

func (d *fakeDaemon) region(h uint32) *shm.Region {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.regions[h]
}

func (d *fakeDaemon) channel(h uint32) *eventfd.EventFD {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.chans[h]
}

func (d *fakeDaemon) serve(c *proto.Conn) {
	for {
		h, body, fds, err := c.Receive()
		if err != nil {
			closeFDs(fds)
			return
		}
		d.mu.Lock()
		d.reqs = append(d.reqs, h)
		override, helloVersion := d.override, d.helloVersion
		d.mu.Unlock()
		rh := proto.Header{Version: proto.ABIVersion, Op: h.Op | proto.OpReply, Seq: h.Seq}
		if h.Op == proto.OpHello {
			var req proto.HelloRequest
			proto.Unmarshal(body, &req)
			if !req.Inspect {
				mem := ""
				if req.ProcessMem && len(fds) == 1 {
					mem, _ = os.Readlink(fmt.Sprintf("/proc/self/fd/%d", fds[0]))
				}
				d.mu.Lock()
				d.helloMem = mem
				d.mu.Unlock()
			}
			closeFDs(fds)
			if helloVersion != 0 {
				rh.Version, rh.Status = helloVersion, unix.EPROTO
				c.Send(rh, proto.ErrorBody{Error: "version mismatch (fake)"})
				c.Close()
				return
			}
			rep := proto.HelloReply{ABI: proto.ABIVersion, Daemon: "fake", SessionID: 7, Device: "fake0", Addr: "127.0.0.1"}
			if req.Inspect {
				c.Send(rh, rep)
			} else {
				c.Send(rh, rep, d.doorbell.FD(), d.status.FD())
			}
			continue
		}
		if override != nil {
			if st, rep, ok := override(h, body); ok {
				closeFDs(fds)
				rh.Status = st
				c.Send(rh, rep)
				continue
			}
		}
		st, rep := d.answer(h, body, fds)
		rh.Status = st
		c.Send(rh, rep)
	}
}

// answer implements the defaults: every create succeeds with a fresh
// handle; regions and channel eventfds are kept for the test.
func (d *fakeDaemon) answer(h proto.Header, body []byte, fds []int) (unix.Errno, any) {
	d.mu.Lock()
	d.next++
	handle := d.next
	d.mu.Unlock()
	keepRegion := func() (unix.Errno, any) {
		if len(fds) != 1 {
			closeFDs(fds)
			return unix.EINVAL, proto.ErrorBody{Error: "want one descriptor"}
		}
		r, err := shm.Map(fds[0], proto.PageSize, unix.PROT_READ|unix.PROT_WRITE)
		if err != nil {
			return unix.EINVAL, proto.ErrorBody{Error: err.Error()}
		}
		d.mu.Lock()
		d.regions[handle] = r
		d.mu.Unlock()
		return 0, proto.Handle{Handle: handle}
	}
	switch h.Op {
	case proto.OpQueryDevice:
		return 0, proto.DeviceAttr{Name: "fake0", MaxQP: 8, MaxSGE: 4, MaxInline: 64}
	case proto.OpQueryPort:
		return 0, proto.PortAttr{State: "active", Addr: "127.0.0.1"}
	case proto.OpAllocPD:
		return 0, proto.Handle{Handle: handle}
	case proto.OpRegMR:
		closeFDs(fds)
		var req proto.RegMRRequest
		if err := proto.Unmarshal(body, &req); err != nil || req.Length == 0 {
			return unix.EINVAL, proto.ErrorBody{Error: "bad reg-mr"}
		}
		return 0, proto.RegMRReply{Handle: handle, LKey: handle<<8 | 0x5a, RKey: handle<<8 | 0x5a}
	case proto.OpCreateCompChannel:
		if len(fds) != 1 {
			closeFDs(fds)
			return unix.EINVAL, proto.ErrorBody{Error: "want one descriptor"}
		}
		e, _ := eventfd.FromFD(fds[0])
		d.mu.Lock()
		d.chans[handle] = e
		d.mu.Unlock()
		return 0, proto.Handle{Handle: handle}
	case proto.OpCreateCQ, proto.OpCreateSRQ:
		return keepRegion()
	case proto.OpCreateQP:
		st, rep := keepRegion()
		if st != 0 {
			return st, rep
		}
		return 0, proto.CreateQPReply{Handle: handle, QPN: 100 + handle, Addr: "127.0.0.1:27001"}
	case proto.OpQueryQP:
		return 0, proto.QueryQPReply{Type: proto.QPTypeUD, State: proto.QPStateRTS, QPN: 5, Addr: "127.0.0.1:27001"}
	case proto.OpModifyQP, proto.OpDeallocPD, proto.OpDeregMR, proto.OpDestroyCQ,
		proto.OpDestroyQP, proto.OpDestroySRQ, proto.OpDestroyCompChannel:
		closeFDs(fds)
		return 0, nil
	}
	closeFDs(fds)
	return unix.EINVAL, proto.ErrorBody{Error: "unknown op"}
}

func openFake(t *testing.T, d *fakeDaemon) *Context {
	t.Helper()
	c, err := Open(WithSocket(d.sock), WithClientName("unit"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// daemonRing lays a ring over a region the client passed (daemon's view).
func daemonRing(t *testing.T, mem []byte, kind proto.RingKind, depth, stride uint32) *shm.Ring {
	t.Helper()
	r, err := shm.NewRing(mem, kind, depth, stride, false)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func isErrno(err error, en unix.Errno) bool { return errors.Is(err, en) }
