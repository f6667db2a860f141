package ud

import (
	"encoding/binary"
	"testing"
	"time"

	"github.com/iwarpd/iwarpd/proto"
	"github.com/iwarpd/iwarpd/verbsd/rnic"
	"golang.org/x/sys/unix"
)

// TestFastpathGROOffEmptyQueue: UDP_GRO goes off on the socket of a rank
// that reads without it (a page without proto.FPFlagGRO) only over an
// empty queue (rnic/fastpath_gro.go, docs/fastpath.md "UDP_GRO goes off
// only over an empty queue"). Real loopback sockets, as c/tests/t_fpgro.c:
// a GSO send of three 102-octet datagrams lands coalesced in the QP's
// socket (UDP_GRO on, as initSocket leaves it) before the page is
// installed; the rank asks for its socket. The hand-back must be put off
// and the buffer must read with its UDP_GRO control message (102 octets a
// datagram) — switched off at the install, as before, it read as one
// datagram of 306 octets; then, the queue empty, the hand-back goes
// through with UDP_GRO off, and the next GSO send arrives as three
// datagrams the rank can read one by one.
func TestFastpathGROOffEmptyQueue(t *testing.T) {
	rx, tx, dst := groSockets(t)
	mem, f := groPage(t, 0)
	q := &rnic.QP{FD: rx, Type: proto.QPTypeUD, State: proto.QPStateRTS, ClientSock: true}
	e := &rnic.Engine{}

	if !gsoSend(t, tx, dst) {
		t.Skip("the kernel refuses UDP GSO over loopback")
	}
	waitQueued(t, rx)
	SetFastpath(q, f)
	want(mem)
	handed := e.FastpathEnd(q, time.Now(), true)
	n, gso := readBuf(t, rx)
	if n > groSeg && gso == 0 {
		t.Fatalf("a buffer coalesced before the page was read with UDP_GRO off (hand-back %v): %d octets without a "+
			"segment size, where %d datagrams of %d were sent: its datagrams would be judged as one", handed, n, groSegs, groSeg)
	}
	if handed {
		t.Fatalf("the socket went to the rank over a queued buffer (read %d octets, segment size %d)", n, gso)
	}
	if !q.FastpathGROPending() || q.Stats[rnic.CFastpathGROWaits] != 1 {
		t.Errorf("after a hand-back put off: pending %v, fastpath_gro_waits %d, want true, 1", q.FastpathGROPending(), q.Stats[rnic.CFastpathGROWaits])
	}
	for i := 0; n == groSeg && gso == 0 && i < groSegs-1; i++ { // not coalesced after all: the rest of it
		n, gso = readBuf(t, rx)
	}

	// The queue is empty: the switch goes through, the socket goes.
	if !e.FastpathEnd(q, time.Now(), true) {
		t.Fatalf("the hand-back over an empty queue was put off (fastpath_gro_waits %d)", q.Stats[rnic.CFastpathGROWaits])
	}
	if o := binary.LittleEndian.Uint32(mem[proto.OffFPOwner:]); o != proto.FPOwnerRank || q.FastpathGROPending() {
		t.Fatalf("after the hand-back: Owner %d pending %v, want the rank's (%d) and done", o, q.FastpathGROPending(), proto.FPOwnerRank)
	}
	if v, err := unix.GetsockoptInt(rx, unix.SOL_UDP, unix.UDP_GRO); err == nil && v != 0 {
		t.Fatalf("UDP_GRO %d on the rank's socket after the hand-back, want 0", v)
	}
	gsoSend(t, tx, dst)
	for k := range groSegs {
		n, gso := readBuf(t, rx)
		if n != groSeg || gso != 0 {
			t.Fatalf("datagram %d after the switch: %d octets, segment size %d; want %d, 0 (segmented at the socket)", k, n, gso, groSeg)
		}
	}
}

// TestFastpathGROKept: a page with proto.FPFlagGRO leaves UDP_GRO on and
// the hand-back does not wait for the queue (the rank leaves coalesced
// buffers to the engine).
func TestFastpathGROKept(t *testing.T) {
	rx, tx, dst := groSockets(t)
	mem, f := groPage(t, proto.FPFlagGRO)
	q := &rnic.QP{FD: rx, Type: proto.QPTypeUD, State: proto.QPStateRTS, ClientSock: true}
	e := &rnic.Engine{}
	if !gsoSend(t, tx, dst) {
		t.Skip("the kernel refuses UDP GSO over loopback")
	}
	waitQueued(t, rx)
	SetFastpath(q, f)
	want(mem)
	if !e.FastpathEnd(q, time.Now(), true) {
		t.Fatal("a rank that reads with UDP_GRO did not get its socket")
	}
	if v, err := unix.GetsockoptInt(rx, unix.SOL_UDP, unix.UDP_GRO); err == nil && v != 1 {
		t.Fatalf("UDP_GRO %d, want 1", v)
	}
	if n, gso := readBuf(t, rx); n > groSeg && gso != groSeg {
		t.Fatalf("read %d octets with segment size %d", n, gso)
	}
}

const groSeg, groSegs = 102, 3

// groSockets makes the QP's socket (loopback, UDP_GRO on) and a sender.
func groSockets(t *testing.T) (rx, tx int, dst *unix.SockaddrInet4) {
	t.Helper()
	sock := func() int {
		fd, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { unix.Close(fd) })
		return fd
	}
	rx, tx = sock(), sock()
	if err := unix.Bind(rx, &unix.SockaddrInet4{Addr: [4]byte{127, 0, 0, 1}}); err != nil {
		t.Fatal(err)
	}
	sa, err := unix.Getsockname(rx)
	if err != nil {
		t.Fatal(err)
	}
	if err := unix.SetsockoptInt(rx, unix.SOL_UDP, unix.UDP_GRO, 1); err != nil {
		t.Skipf("no UDP_GRO: %v", err)
	}
	return rx, tx, sa.(*unix.SockaddrInet4)
}

// groPage makes a client's fast-path page with flags and installs it as
// the daemon does (rnic.NewFastpath).
func groPage(t *testing.T, flags uint16) ([]byte, *rnic.Fastpath) {
	t.Helper()
	fd, err := unix.MemfdCreate("fastpath", unix.MFD_CLOEXEC|unix.MFD_ALLOW_SEALING)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(fd)
	if err := unix.Ftruncate(fd, proto.FastpathPageLen); err != nil {
		t.Fatal(err)
	}
	if _, err := unix.FcntlInt(uintptr(fd), unix.F_ADD_SEALS, unix.F_SEAL_SHRINK|unix.F_SEAL_GROW); err != nil {
		t.Fatal(err)
	}
	mem, err := unix.Mmap(fd, 0, proto.FastpathPageLen, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { unix.Munmap(mem) })
	binary.LittleEndian.PutUint32(mem[proto.OffFPMagic:], proto.FastpathMagic)
	binary.LittleEndian.PutUint16(mem[proto.OffFPVersion:], proto.FastpathVersion)
	binary.LittleEndian.PutUint16(mem[proto.OffFPFlags:], flags)
	dfd, err := unix.Dup(fd)
	if err != nil {
		t.Fatal(err)
	}
	f, err := rnic.NewFastpath(dfd)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(f.Close)
	return mem, f
}

// want is the rank's request for its socket (Want).
func want(mem []byte) { binary.LittleEndian.PutUint32(mem[proto.OffFPWant:], 1) }

// gsoSend sends groSegs datagrams of groSeg octets (octet i is i) as one
// UDP_SEGMENT send to dst; false: the kernel refused GSO.
func gsoSend(t *testing.T, fd int, dst *unix.SockaddrInet4) bool {
	t.Helper()
	b := make([]byte, groSeg*groSegs)
	for i := range b {
		b[i] = byte(i)
	}
	oob := make([]byte, unix.CmsgSpace(2))
	putSegmentCmsg(oob, groSeg)
	if err := unix.Sendmsg(fd, b, oob, dst, 0); err != nil {
		if GSORefused(err) {
			return false
		}
		t.Fatal(err)
	}
	return true
}

// waitQueued waits (bounded) until fd has a buffer queued.
func waitQueued(t *testing.T, fd int) {
	t.Helper()
	p := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}
	if n, err := unix.Poll(p, 5000); n != 1 || err != nil {
		t.Fatalf("nothing arrived on the QP's socket within 5 s: %v", err)
	}
}

// readBuf reads the buffer at the head of fd (waiting a bounded time) and
// returns its length and its UDP_GRO segment size (0: none).
func readBuf(t *testing.T, fd int) (int, int) {
	t.Helper()
	waitQueued(t, fd)
	b := make([]byte, 4096)
	oob := make([]byte, 64)
	n, oobn, _, _, err := unix.Recvmsg(fd, b, oob, unix.MSG_DONTWAIT)
	if err != nil {
		t.Fatal(err)
	}
	return n, GROSegmentSize(oob, oobn)
}
