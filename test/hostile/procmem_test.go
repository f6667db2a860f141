package hostile

import (
	"bytes"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/iwarpd/iwarpd/ofverbs"
	"github.com/iwarpd/iwarpd/test/daemontest"
	"golang.org/x/sys/unix"
)

// Process-memory MRs end to end (issue 10, "memory an application owns";
// docs/memory-registration.md): memory of the client's own heap, not a
// Buffer, registered with ofverbs (proto.RegMRRequest.Process), as the
// source and target of Sends, RDMA Writes and Reads over RD and RC between
// two daemons; memory unmapped while registered fails the operations on it
// with access errors, and both daemons and the other QPs go on.
//
// Ports: RD ports 26800-26819 (one per daemon pair member), RC listener
// 26850 (TCP).

const (
	pmRDPortsA   = "26800-26809"
	pmRDPortsB   = "26810-26819"
	pmListenPort = 26850
)

// pmEnd is a QP of one type with heap memory registered as process memory.
type pmEnd struct {
	name     string
	ctx      *ofverbs.Context
	pd       *ofverbs.PD
	mem      []byte
	mr       *ofverbs.MR
	scq, rcq *ofverbs.CQ
	qp       *ofverbs.QP
	wcs      [1]ofverbs.WC
}

const pmAccess = ofverbs.AccessLocalWrite | ofverbs.AccessRemoteWrite | ofverbs.AccessRemoteRead

func newPMEnd(t *testing.T, name string, ctx *ofverbs.Context, typ ofverbs.QPType, size int) *pmEnd {
	t.Helper()
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
	}
	e := &pmEnd{name: name, ctx: ctx, mem: make([]byte, size)} // Go heap: no Buffer holds it
	var err error
	e.pd, err = ctx.AllocPD()
	must(err)
	e.mr, err = e.pd.RegMR(e.mem, pmAccess)
	must(err)
	if !e.mr.Process() {
		t.Fatalf("%s: heap memory was not registered as process memory", name)
	}
	e.scq, err = ctx.CreateCQ(256, nil)
	must(err)
	e.rcq, err = ctx.CreateCQ(256, nil)
	must(err)
	e.qp, err = e.pd.CreateQP(ofverbs.QPInitAttr{Type: typ, SendCQ: e.scq, RecvCQ: e.rcq,
		Cap: ofverbs.QPCap{MaxSendWR: 64, MaxRecvWR: 64, MaxSendSGE: 2, MaxRecvSGE: 2}})
	must(err)
	if typ == ofverbs.QPTypeRC {
		must(e.qp.ModifyState(ofverbs.QPStateInit))
	} else {
		must(e.qp.ModifyState(ofverbs.QPStateInit, ofverbs.QPStateRTR, ofverbs.QPStateRTS))
	}
	return e
}

// wait returns the next completion of cq (bounded).
func (e *pmEnd) wait(cq *ofverbs.CQ) (ofverbs.WC, error) {
	deadline := time.Now().Add(daemontest.Scaled(20 * time.Second))
	for i := 0; ; i++ {
		n, err := cq.Poll(e.wcs[:])
		if err != nil {
			return ofverbs.WC{}, fmt.Errorf("%s: poll: %w", e.name, err)
		}
		if n == 1 {
			return e.wcs[0], nil
		}
		if time.Now().After(deadline) {
			return ofverbs.WC{}, fmt.Errorf("%s: no completion within %v", e.name, daemontest.Scaled(20*time.Second))
		}
		if i > 1000 {
			time.Sleep(50 * time.Microsecond)
		}
	}
}

func (e *pmEnd) post(t *testing.T, wr ofverbs.SendWR) {
	t.Helper()
	if n, err := e.qp.PostSend([]ofverbs.SendWR{wr}); n != 1 {
		t.Fatalf("%s: post send: %v", e.name, err)
	}
}

func (e *pmEnd) postRecv(t *testing.T, id uint64, sgl ...ofverbs.SGE) {
	t.Helper()
	if n, err := e.qp.PostRecv([]ofverbs.RecvWR{{ID: id, SGL: sgl}}); n != 1 {
		t.Fatalf("%s: post receive: %v", e.name, err)
	}
}

// expect waits for a completion of cq with status want.
func (e *pmEnd) expect(t *testing.T, cq *ofverbs.CQ, what string, want ofverbs.WCStatus) ofverbs.WC {
	t.Helper()
	wc, err := e.wait(cq)
	if err != nil {
		t.Fatalf("%s: %v", what, err)
	}
	if wc.Status != want {
		t.Fatalf("%s: completion %+v, want status %v", what, wc, want)
	}
	return wc
}

func fill(b []byte, seed int) {
	for i := range b {
		b[i] = byte(i*7 + seed)
	}
}

// mmapAnon maps n octets of anonymous memory (not Go heap: the test
// unmaps it while registered).
func mmapAnon(t *testing.T, n int) []byte {
	t.Helper()
	b, err := unix.Mmap(-1, 0, n, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

var pmSizes = []int{64, 4096, 65536, 1 << 20}

// TestProcessMemoryRD: over RD between two daemons, Sends from heap into
// heap (with the receive split over two SGEs), RDMA Reads from the peer's
// heap into heap; then memory unmapped while registered: a Send from it
// fails with a local protection error, a Read of it fails with a remote
// access error, a Send into it fails at the receiver, and the QPs, the
// sessions and the daemons go on.
func TestProcessMemoryRD(t *testing.T) {
	gc := []string{"GOGC=1"} // see TestProcessMemoryRC
	da := daemontest.Start(t, "pm-rd-a", daemontest.Options{Ports: nextPorts(), Extra: []string{"-rd-ports", pmRDPortsA}, Env: gc})
	db := daemontest.Start(t, "pm-rd-b", daemontest.Options{Ports: nextPorts(), Extra: []string{"-rd-ports", pmRDPortsB}, Env: gc})
	const size = 2 << 20
	a := newPMEnd(t, "a", da.Open(t, "pm-rd-a"), ofverbs.QPTypeRD, size)
	b := newPMEnd(t, "b", db.Open(t, "pm-rd-b"), ofverbs.QPTypeRD, size)
	ah, err := a.pd.CreateAHTo(b.qp.Endpoint())
	if err != nil {
		t.Fatal(err)
	}
	ahBA, err := b.pd.CreateAHTo(a.qp.Endpoint())
	if err != nil {
		t.Fatal(err)
	}
	half := size / 2
	for i, n := range pmSizes {
		src := a.mem[:n]
		fill(src, i)
		clear(b.mem)
		// The receive is split: 100 octets, then the rest.
		b.postRecv(t, uint64(i), b.mr.SGE(b.mem[:100]), b.mr.SGE(b.mem[half:]))
		a.post(t, ofverbs.SendWR{ID: uint64(i), Opcode: ofverbs.WRSend, AH: ah, Signaled: true, SGL: []ofverbs.SGE{a.mr.SGE(src)}})
		a.expect(t, a.scq, fmt.Sprintf("send %d", n), ofverbs.WCSuccess)
		wc := b.expect(t, b.rcq, fmt.Sprintf("receive %d", n), ofverbs.WCSuccess)
		got := append(append([]byte(nil), b.mem[:min(n, 100)]...), b.mem[half:half+max(0, n-100)]...)
		if int(wc.ByteLen) != n || !bytes.Equal(got, src) {
			t.Fatalf("send of %d octets: byte_len %d, data equal %v", n, wc.ByteLen, bytes.Equal(got, src))
		}
		if n > 100 && b.mem[100] != 0 {
			t.Fatalf("send of %d octets: octets after the first SGE were written", n)
		}
	}
	// RDMA Read of b's heap into a's heap.
	for i, n := range pmSizes {
		fill(b.mem[:n], 50+i)
		clear(a.mem[:n])
		a.post(t, ofverbs.SendWR{ID: uint64(100 + i), Opcode: ofverbs.WRRDMARead, AH: ah, Signaled: true,
			SGL: []ofverbs.SGE{a.mr.SGE(a.mem[:n])}, RemoteAddr: b.mr.Addr(), RKey: b.mr.RKey()})
		a.expect(t, a.scq, fmt.Sprintf("read %d", n), ofverbs.WCSuccess)
		if !bytes.Equal(a.mem[:n], b.mem[:n]) {
			t.Fatalf("read of %d octets: data differ", n)
		}
	}

	// Memory unmapped while registered.
	ga := mmapAnon(t, 1<<16)
	gmrA, err := a.pd.RegMR(ga, pmAccess)
	if err != nil {
		t.Fatal(err)
	}
	gb := mmapAnon(t, 1<<16)
	gmrB, err := b.pd.RegMR(gb, pmAccess)
	if err != nil {
		t.Fatal(err)
	}
	sgeA, sgeB := gmrA.SGE(ga[:4096]), gmrB.SGE(gb[:4096])
	addrB, rkeyB := gmrB.Addr(), gmrB.RKey()
	unix.Munmap(ga)
	unix.Munmap(gb)
	// A Send from unmapped memory: local protection error.
	a.post(t, ofverbs.SendWR{ID: 200, Opcode: ofverbs.WRSend, AH: ah, Signaled: true, SGL: []ofverbs.SGE{sgeA}})
	a.expect(t, a.scq, "send from unmapped memory", ofverbs.WCLocProtErr)
	// The QP went to ERROR (a local error): a fresh pair goes on below.
	// A Read of b's unmapped memory (from a new QP of a): remote access error
	// at a, b's QP untouched.
	a2 := newPMEnd(t, "a2", a.ctx, ofverbs.QPTypeRD, 1<<16)
	ah2, err := a2.pd.CreateAHTo(b.qp.Endpoint())
	if err != nil {
		t.Fatal(err)
	}
	a2.post(t, ofverbs.SendWR{ID: 201, Opcode: ofverbs.WRRDMARead, AH: ah2, Signaled: true,
		SGL: []ofverbs.SGE{a2.mr.SGE(a2.mem[:4096])}, RemoteAddr: addrB, RKey: rkeyB})
	if wc, err := a2.wait(a2.scq); err != nil || wc.Status == ofverbs.WCSuccess {
		t.Fatalf("read of unmapped remote memory: %+v, %v; want an access error", wc, err)
	}
	// A Send into unmapped memory at b: b's receive fails, b goes on.
	ahB2, err := b.pd.CreateAHTo(a2.qp.Endpoint())
	if err != nil {
		t.Fatal(err)
	}
	_ = ahB2
	b.postRecv(t, 300, sgeB)
	a2.post(t, ofverbs.SendWR{ID: 202, Opcode: ofverbs.WRSend, AH: ah2, Signaled: true, SGL: []ofverbs.SGE{a2.mr.SGE(a2.mem[:512])}})
	if wc, err := b.wait(b.rcq); err != nil || wc.Status != ofverbs.WCLocProtErr {
		t.Fatalf("send into unmapped memory: receiver completion %+v, %v; want %v", wc, err, ofverbs.WCLocProtErr)
	}
	a2.wait(a2.scq) // the sender's completion (whatever the RD layer made of it)

	// Both sides keep working: b (a QP that saw a local error) is in
	// ERROR; a fresh QP of b's session receives from a2, and b's daemon
	// serves a Read of b's heap.
	b2 := newPMEnd(t, "b2", b.ctx, ofverbs.QPTypeRD, 1<<16)
	ah3, err := a2.pd.CreateAHTo(b2.qp.Endpoint())
	if err != nil {
		t.Fatal(err)
	}
	fill(a2.mem[:4000], 9)
	b2.postRecv(t, 400, b2.mr.SGE(b2.mem[:4096]))
	a2.post(t, ofverbs.SendWR{ID: 400, Opcode: ofverbs.WRSend, AH: ah3, Signaled: true, SGL: []ofverbs.SGE{a2.mr.SGE(a2.mem[:4000])}})
	a2.expect(t, a2.scq, "send after the faults", ofverbs.WCSuccess)
	b2.expect(t, b2.rcq, "receive after the faults", ofverbs.WCSuccess)
	if !bytes.Equal(b2.mem[:4000], a2.mem[:4000]) {
		t.Fatal("send after the faults: data differ")
	}
	_ = ahBA
	da.CheckAlive(t)
	db.CheckAlive(t)
}

// pmConnect connects cli to srv (srv's context listens on port).
func pmConnect(t *testing.T, port int, srv, cli *pmEnd) {
	t.Helper()
	l, err := srv.ctx.Listen(fmt.Sprintf("127.0.0.1:%d", port))
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	accepted := make(chan error, 1)
	go func() {
		req, err := l.GetRequest(daemontest.Scaled(15 * time.Second))
		if err != nil {
			accepted <- err
			return
		}
		accepted <- req.Accept(srv.qp, ofverbs.ConnParam{})
	}()
	if err := cli.qp.Connect(l.Addr(), ofverbs.ConnParam{Timeout: daemontest.Scaled(10 * time.Second)}); err != nil {
		t.Fatalf("connect: %v", err)
	}
	select {
	case err := <-accepted:
		if err != nil {
			t.Fatalf("accept: %v", err)
		}
	case <-time.After(daemontest.Scaled(20 * time.Second)):
		t.Fatal("accept did not return")
	}
}

// TestProcessMemoryRC: over RC between two daemons, Sends, RDMA Writes and
// RDMA Reads between the two processes' heaps; then an RDMA Write into
// memory the target unmapped while registered gets a remote access error
// (the target's daemon sends a Terminate), a Read of the writer's own
// unmapped sink fails locally, and a new connection between the same
// sessions works.
func TestProcessMemoryRC(t *testing.T) {
	// GOGC=1: the daemons collect all the time, so their engine threads get
	// Go's preemption signal often; a ppoll of the peer's pidfd interrupted
	// by it once counted as the peer gone (1 MiB RC ping-pong: 9 failed runs
	// in 16).
	gc := []string{"GOGC=1"}
	da := daemontest.Start(t, "pm-rc-a", daemontest.Options{Ports: nextPorts(), Env: gc})
	db := daemontest.Start(t, "pm-rc-b", daemontest.Options{Ports: nextPorts(), Env: gc})
	const size = 2 << 20
	ca, cb := da.Open(t, "pm-rc-a"), db.Open(t, "pm-rc-b")
	a := newPMEnd(t, "a", ca, ofverbs.QPTypeRC, size)
	b := newPMEnd(t, "b", cb, ofverbs.QPTypeRC, size)
	pmConnect(t, pmListenPort, b, a)
	// Remote atomics need memfd memory (docs/memory-registration.md).
	if _, err := b.pd.RegMR(make([]byte, 64), ofverbs.AccessLocalWrite|ofverbs.AccessRemoteAtomic); !errors.Is(err, unix.EOPNOTSUPP) {
		t.Fatalf("process memory with remote atomic access: %v, want EOPNOTSUPP", err)
	}
	half := size / 2
	for i, n := range pmSizes {
		fill(a.mem[:n], i)
		clear(b.mem)
		b.postRecv(t, uint64(i), b.mr.SGE(b.mem[:n]))
		a.post(t, ofverbs.SendWR{ID: uint64(i), Opcode: ofverbs.WRSend, Signaled: true, SGL: []ofverbs.SGE{a.mr.SGE(a.mem[:n])}})
		a.expect(t, a.scq, fmt.Sprintf("send %d", n), ofverbs.WCSuccess)
		wc := b.expect(t, b.rcq, fmt.Sprintf("receive %d", n), ofverbs.WCSuccess)
		if int(wc.ByteLen) != n || !bytes.Equal(b.mem[:n], a.mem[:n]) {
			t.Fatalf("send %d: byte_len %d, data equal %v", n, wc.ByteLen, bytes.Equal(b.mem[:n], a.mem[:n]))
		}
		// RDMA Write a -> b's upper half.
		fill(a.mem[:n], 30+i)
		a.post(t, ofverbs.SendWR{ID: uint64(10 + i), Opcode: ofverbs.WRRDMAWrite, Signaled: true,
			SGL: []ofverbs.SGE{a.mr.SGE(a.mem[:n])}, RemoteAddr: b.mr.Addr() + uint64(half), RKey: b.mr.RKey()})
		a.expect(t, a.scq, fmt.Sprintf("write %d", n), ofverbs.WCSuccess)
		// An RC Write completes at the writer when TCP took it; the target
		// sees it placed soon after.
		daemontest.Eventually(t, fmt.Sprintf("write of %d octets placed in b's heap", n), 10*time.Second, func() bool {
			return bytes.Equal(b.mem[half:half+n], a.mem[:n])
		})
		// RDMA Read of b's lower half into a's upper half.
		fill(b.mem[:n], 60+i)
		a.post(t, ofverbs.SendWR{ID: uint64(20 + i), Opcode: ofverbs.WRRDMARead, Signaled: true,
			SGL: []ofverbs.SGE{a.mr.SGE(a.mem[half : half+n])}, RemoteAddr: b.mr.Addr(), RKey: b.mr.RKey()})
		a.expect(t, a.scq, fmt.Sprintf("read %d", n), ofverbs.WCSuccess)
		if !bytes.Equal(a.mem[half:half+n], b.mem[:n]) {
			t.Fatalf("read %d: data differ", n)
		}
	}

	// An RDMA Write into memory b unmapped while registered.
	gb := mmapAnon(t, 1<<16)
	gmrB, err := b.pd.RegMR(gb, pmAccess)
	if err != nil {
		t.Fatal(err)
	}
	addrB, rkeyB := gmrB.Addr(), gmrB.RKey()
	unix.Munmap(gb)
	// A Read behind the Write is outstanding when the Terminate comes (the
	// Write itself may complete first: RC completes it once TCP took it).
	wrs := []ofverbs.SendWR{{ID: 100, Opcode: ofverbs.WRRDMAWrite, Signaled: true,
		SGL: []ofverbs.SGE{a.mr.SGE(a.mem[:4096])}, RemoteAddr: addrB, RKey: rkeyB},
		{ID: 101, Opcode: ofverbs.WRRDMARead, Signaled: true, SGL: []ofverbs.SGE{a.mr.SGE(a.mem[:16])},
			RemoteAddr: b.mr.Addr(), RKey: b.mr.RKey()}}
	if n, err := a.qp.PostSend(wrs); n != len(wrs) {
		t.Fatalf("post: %d, %v", n, err)
	}
	remoteErr := 0
	for k := range wrs {
		wc, err := a.wait(a.scq)
		switch {
		case err != nil:
			t.Fatalf("write into unmapped memory: completion %d: %v", k, err)
		case wc.Status == ofverbs.WCRemAccessErr && wc.Flags&ofverbs.WCFlagTermValid != 0:
			remoteErr++
		case wc.Status == ofverbs.WCSuccess && wc.ID == 100 && remoteErr == 0:
		case wc.Status == ofverbs.WCWRFlushErr && remoteErr > 0:
		default:
			t.Fatalf("write into unmapped memory: completion %+v", wc)
		}
	}
	if remoteErr != 1 {
		t.Fatalf("write into unmapped memory: %d remote access errors at the writer, want 1", remoteErr)
	}

	// A new connection between the same sessions: a Read whose local sink
	// a unmapped fails at a with a local error; then a Write works.
	a2 := newPMEnd(t, "a2", ca, ofverbs.QPTypeRC, 1<<16)
	b2 := newPMEnd(t, "b2", cb, ofverbs.QPTypeRC, 1<<16)
	pmConnect(t, pmListenPort+1, b2, a2)
	ga := mmapAnon(t, 1<<16)
	gmrA, err := a2.pd.RegMR(ga, pmAccess)
	if err != nil {
		t.Fatal(err)
	}
	sinkA := gmrA.SGE(ga[:4096])
	unix.Munmap(ga)
	a2.post(t, ofverbs.SendWR{ID: 200, Opcode: ofverbs.WRRDMARead, Signaled: true, SGL: []ofverbs.SGE{sinkA},
		RemoteAddr: b2.mr.Addr(), RKey: b2.mr.RKey()})
	if wc, err := a2.wait(a2.scq); err != nil || wc.Status == ofverbs.WCSuccess {
		t.Fatalf("read into unmapped memory: %+v, %v; want an error", wc, err)
	}
	a3 := newPMEnd(t, "a3", ca, ofverbs.QPTypeRC, 1<<16)
	b3 := newPMEnd(t, "b3", cb, ofverbs.QPTypeRC, 1<<16)
	pmConnect(t, pmListenPort+2, b3, a3)
	fill(a3.mem[:5000], 7)
	a3.post(t, ofverbs.SendWR{ID: 300, Opcode: ofverbs.WRRDMAWrite, Signaled: true,
		SGL: []ofverbs.SGE{a3.mr.SGE(a3.mem[:5000])}, RemoteAddr: b3.mr.Addr(), RKey: b3.mr.RKey()})
	a3.expect(t, a3.scq, "write after the faults", ofverbs.WCSuccess)
	daemontest.Eventually(t, "write after the faults placed", 10*time.Second, func() bool {
		return bytes.Equal(b3.mem[:5000], a3.mem[:5000])
	})
	da.CheckAlive(t)
	db.CheckAlive(t)
}

// TestProcessMemoryDatagram: UD Sends heap to heap (one datagram, and
// messages of several, reassembled and scattered), and Write-Records over
// UD and RD into the target's heap, with the record landing in a heap
// receive buffer.
func TestProcessMemoryDatagram(t *testing.T) {
	gc := []string{"GOGC=1"} // see TestProcessMemoryRC
	da := daemontest.Start(t, "pm-dg-a", daemontest.Options{Ports: nextPorts(), Extra: []string{"-rd-ports", pmRDPortsA}, Env: gc})
	db := daemontest.Start(t, "pm-dg-b", daemontest.Options{Ports: nextPorts(), Extra: []string{"-rd-ports", pmRDPortsB}, Env: gc})
	ca, cb := da.Open(t, "pm-dg-a"), db.Open(t, "pm-dg-b")
	const size = 2 << 20
	for _, typ := range []ofverbs.QPType{ofverbs.QPTypeUD, ofverbs.QPTypeRD} {
		a := newPMEnd(t, "a", ca, typ, size)
		b := newPMEnd(t, "b", cb, typ, size)
		ah, err := a.pd.CreateAHTo(b.qp.Endpoint())
		if err != nil {
			t.Fatal(err)
		}
		if typ == ofverbs.QPTypeUD {
			// Up to 256 KiB (5 datagrams): UD may lose a datagram of a
			// longer burst even on loopback.
			for i, n := range []int{64, 4096, 65536, 256 << 10} {
				fill(a.mem[:n], i)
				clear(b.mem[:n])
				b.postRecv(t, uint64(i), b.mr.SGE(b.mem[:n]))
				a.post(t, ofverbs.SendWR{ID: uint64(i), Opcode: ofverbs.WRSend, AH: ah, Signaled: true, SGL: []ofverbs.SGE{a.mr.SGE(a.mem[:n])}})
				a.expect(t, a.scq, fmt.Sprintf("UD send %d", n), ofverbs.WCSuccess)
				wc := b.expect(t, b.rcq, fmt.Sprintf("UD receive %d", n), ofverbs.WCSuccess)
				if int(wc.ByteLen) != n || !bytes.Equal(b.mem[:n], a.mem[:n]) {
					t.Fatalf("UD send %d: byte_len %d, data equal %v", n, wc.ByteLen, bytes.Equal(b.mem[:n], a.mem[:n]))
				}
			}
		}
		// Write-Record of 100 000 octets into b's heap at 1 MiB; the record
		// lands in b's heap at 0.
		const n, at = 100000, 1 << 20
		fill(a.mem[:n], 77)
		clear(b.mem)
		b.postRecv(t, 500, b.mr.SGE(b.mem[:64]))
		a.post(t, ofverbs.SendWR{ID: 500, Opcode: ofverbs.WRWriteRecord, AH: ah, Signaled: true,
			SGL: []ofverbs.SGE{a.mr.SGE(a.mem[:n])}, RemoteAddr: b.mr.Addr() + at, RKey: b.mr.RKey()})
		a.expect(t, a.scq, fmt.Sprintf("%v write-record", typ), ofverbs.WCSuccess)
		wc := b.expect(t, b.rcq, fmt.Sprintf("%v write-record completion", typ), ofverbs.WCSuccess)
		ranges, err := ofverbs.ParseRecord(b.mem[:64])
		if err != nil || wc.Opcode != ofverbs.WCRecvWriteRecord || len(ranges) != 1 || ranges[0] != (ofverbs.Range{Offset: 0, Length: n}) {
			t.Fatalf("%v write-record: completion %+v, record %v (%v)", typ, wc, ranges, err)
		}
		if !bytes.Equal(b.mem[at:at+n], a.mem[:n]) {
			t.Fatalf("%v write-record: data differ", typ)
		}
	}
	da.CheckAlive(t)
	db.CheckAlive(t)
}
