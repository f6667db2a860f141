package hostile

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"
	"unsafe"

	"github.com/iwarpd/iwarpd/ofverbs"
	"github.com/iwarpd/iwarpd/proto"
	"github.com/iwarpd/iwarpd/test/daemontest"
	"golang.org/x/sys/unix"
)

// Issue 18, defect 3: a client made the daemon allocate its memory. It
// registered a 1 GiB memfd, punched its pages out (MADV_REMOVE: client
// RSS 5 MB) and sent itself Write-Records: every page the daemon wrote was
// allocated by the daemon, charged to the daemon's cgroup (RSS 24 -> 1,072
// MB). Now (verbsd/rnic/holeguard.go) a range with a hole is refused at
// registration (regions and rings), and a page punched out afterwards is
// never filled by the daemon: the QP that touches it fails.

const holesSize = 256 << 20 // the attack's region: big enough to show on this machine

func init() { helpers["holes"] = helperHoles }

// helperHoles runs the attack and says what happened, one line each:
//
//	refused-mr ERRNO MSG     reg-mr of a memfd with a hole
//	refused-cq ERRNO MSG     create-cq on a memfd never written
//	punched RSS              the region registered, then punched; the client's VmRSS
//	attack STATUS DETAIL     how the Write-Records into the holes ended
//	event WHAT               the asynchronous event that says why
//	resident N               pages of the region the file holds afterwards
//	done
//
// then holds everything until stdin closes (bounded).
func helperHoles() int {
	sock := os.Getenv(sockEnv)
	page := unix.Getpagesize()

	// Rings: a CQ on a memfd the client never wrote.
	if r, err := rawOpen(sock); err == nil {
		fd, err := unix.MemfdCreate("hostile-ring", unix.MFD_CLOEXEC|unix.MFD_ALLOW_SEALING)
		if err == nil {
			unix.Ftruncate(fd, 1<<20) // more than the ring needs: never written
			unix.FcntlInt(uintptr(fd), unix.F_ADD_SEALS, unix.F_SEAL_SHRINK|unix.F_SEAL_GROW)
			_, err = r.call(proto.OpCreateCQ, proto.CreateCQRequest{Depth: 64}, nil, fd)
			unix.Close(fd)
		}
		var re *rawError
		if errors.As(err, &re) {
			fmt.Printf("refused-cq %d %s\n", int(re.Errno), re.Msg)
		} else {
			fmt.Printf("refused-cq 0 not refused: %v\n", err)
		}
		r.Close()
	} else {
		return helperFail("raw open: %v", err)
	}

	c, err := ofverbs.Open(ofverbs.WithSocket(sock), ofverbs.WithClientName("holes"))
	if err != nil {
		return helperFail("open: %v", err)
	}
	defer c.Close()
	pd, err := c.AllocPD()
	if err != nil {
		return helperFail("alloc-pd: %v", err)
	}
	// Punched before registration: refused.
	sparse, err := c.AllocBuffer(1 << 20)
	if err != nil {
		return helperFail("alloc-buffer: %v", err)
	}
	if err := unix.Madvise(sparse.Bytes()[64<<10:], unix.MADV_REMOVE); err != nil {
		return helperFail("madvise MADV_REMOVE: %v", err)
	}
	if _, err := pd.RegMR(sparse.Bytes(), ofverbs.AccessLocalWrite|ofverbs.AccessRemoteWrite); err != nil {
		var oe *ofverbs.Error
		errors.As(err, &oe)
		errno := 0
		if oe != nil {
			errno = int(oe.Errno)
		}
		fmt.Printf("refused-mr %d %v\n", errno, err)
	} else {
		fmt.Println("refused-mr 0 registered")
	}

	// Punched after registration.
	big, err := c.AllocBuffer(holesSize) // allocated (and charged) by the client: shm.Create populates
	if err != nil {
		return helperFail("alloc-buffer: %v", err)
	}
	mr, err := pd.RegMR(big.Bytes(), ofverbs.AccessLocalWrite|ofverbs.AccessRemoteWrite)
	if err != nil {
		return helperFail("reg-mr of the populated region: %v", err)
	}
	srcBuf, err := c.AllocBuffer(2 << 20)
	if err != nil {
		return helperFail("alloc-buffer: %v", err)
	}
	src := srcBuf.Bytes()
	smr, err := pd.RegMR(src, ofverbs.AccessLocalWrite)
	if err != nil {
		return helperFail("reg-mr: %v", err)
	}
	cq, err := c.CreateCQ(256, nil)
	if err != nil {
		return helperFail("create-cq: %v", err)
	}
	qp, err := pd.CreateQP(ofverbs.QPInitAttr{Type: ofverbs.QPTypeUD, SendCQ: cq, RecvCQ: cq,
		Cap: ofverbs.QPCap{MaxSendWR: 64, MaxRecvWR: 64, MaxSendSGE: 1, MaxRecvSGE: 1}})
	if err != nil {
		return helperFail("create-qp: %v", err)
	}
	if err := qp.ModifyState(ofverbs.QPStateInit, ofverbs.QPStateRTR, ofverbs.QPStateRTS); err != nil {
		return helperFail("modify-qp: %v", err)
	}
	ah, err := pd.CreateAHTo(qp.Endpoint())
	if err != nil {
		return helperFail("create-ah: %v", err)
	}
	mem := big.Bytes()
	if err := unix.Madvise(mem, unix.MADV_REMOVE); err != nil {
		return helperFail("madvise MADV_REMOVE: %v", err)
	}
	fmt.Printf("punched %d\n", procVmRSS(os.Getpid()))

	// Write-Records of 1 MiB into every MiB of the punched region, 32 at
	// a time, each with a receive for its record.
	const chunk = 1 << 20
	recs := src[chunk:]
	status, detail := "completed", "every Write-Record completed without error"
	wcs := make([]ofverbs.WC, 64)
	deadline := time.Now().Add(daemontest.Scaled(60 * time.Second))
	outstanding := 0
	for off := 0; off < holesSize && status == "completed"; {
		for k := 0; k < 32 && off < holesSize; k++ {
			slot := recs[(off/chunk)%1024*64:][:64]
			if n, err := qp.PostRecv([]ofverbs.RecvWR{{ID: uint64(off), SGL: []ofverbs.SGE{smr.SGE(slot)}}}); n != 1 {
				status, detail = "failed", fmt.Sprintf("post-recv: %v", err)
				break
			}
			if n, err := qp.PostSend([]ofverbs.SendWR{{ID: uint64(off), Opcode: ofverbs.WRWriteRecord, AH: ah, Signaled: true,
				SGL: []ofverbs.SGE{smr.SGE(src[:chunk])}, RemoteAddr: mr.Addr() + uint64(off), RKey: mr.RKey()}}); n != 1 {
				status, detail = "failed", fmt.Sprintf("post-send: %v", err)
				break
			}
			outstanding += 2
			off += chunk
		}
		for i := 0; outstanding > 0 && status == "completed"; i++ {
			n, err := cq.Poll(wcs)
			if err != nil {
				status, detail = "failed", fmt.Sprintf("poll: %v", err)
				break
			}
			for _, wc := range wcs[:n] {
				outstanding--
				if wc.Status != ofverbs.WCSuccess {
					status, detail = "failed", fmt.Sprintf("completion %v of work request %d (opcode %v)", wc.Status, wc.ID, wc.Opcode)
				}
			}
			if err := c.Err(); err != nil {
				status, detail = "failed", fmt.Sprintf("session ended: %v", err)
			}
			if time.Now().After(deadline) {
				status, detail = "stuck", fmt.Sprintf("%d completions missing after %v", outstanding, daemontest.Scaled(60*time.Second))
			}
			if n == 0 && i > 100 {
				time.Sleep(200 * time.Microsecond)
			}
		}
	}
	fmt.Printf("attack %s %s\n", status, detail)
	// Why: the QP's fatal event names the cause (bounded wait).
	why := "no event"
	select {
	case ev := <-c.AsyncEvents():
		why = ev.String()
	case <-time.After(daemontest.Scaled(10 * time.Second)):
	}
	fmt.Printf("event %s\n", why)
	fmt.Printf("resident %d\n", residentPages(mem, page))
	fmt.Println("done")
	done := make(chan struct{})
	go func() {
		bufio.NewReader(os.Stdin).ReadString('\n')
		close(done)
	}()
	select {
	case <-done:
	case <-time.After(helperLifetime()):
	}
	return 0
}

// residentPages counts the pages of a shared mapping the file holds
// (mincore(2) reports the page cache of a file mapping).
func residentPages(mem []byte, page int) int {
	vec := make([]byte, len(mem)/page)
	if _, _, errno := unix.Syscall(unix.SYS_MINCORE, uintptr(unsafe.Pointer(&mem[0])), uintptr(len(mem)),
		uintptr(unsafe.Pointer(&vec[0]))); errno != 0 {
		return -1
	}
	n := 0
	for _, v := range vec {
		n += int(v & 1)
	}
	return n
}

// procVmRSS and rssShmem read a process's VmRSS and RssShmem in octets (-1 if
// unreadable).
func procVmRSS(pid int) int64 { return statusField(pid, "VmRSS:") }
func rssShmem(pid int) int64  { return statusField(pid, "RssShmem:") }

func statusField(pid int, name string) int64 {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return -1
	}
	for _, line := range strings.Split(string(b), "\n") {
		if f := strings.Fields(line); len(f) >= 2 && f[0] == name {
			kb, err := strconv.ParseInt(f[1], 10, 64)
			if err != nil {
				return -1
			}
			return kb << 10
		}
	}
	return -1
}

// TestHostileHoles: the sparse-memfd attack of issue 18 with a region of
// holesSize. A region or ring with a hole is refused at registration with
// EFAULT; Write-Records into a region punched out after registration fail
// (the QP goes to ERROR) instead of making the daemon allocate the pages:
// the daemon's RSS grows by less than a tenth of the punched size, the
// file gets back fewer pages than that, and a well-behaved client beside
// the attack works before, during and after.
func TestHostileHoles(t *testing.T) {
	d := daemontest.Start(t, "holes", daemontest.Options{Ports: nextPorts()})
	g := newGoodClient(t, d)
	g.check(t, "before the attack")
	beforeRSS, beforeShm := procVmRSS(d.PID()), rssShmem(d.PID())
	cmd := startHelper(t, "holes", d.Sock)
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var stderr daemontest.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() {
		stdin.Close()
		cmd.Wait()
	}()
	said := map[string]string{}
	lines := make(chan string)
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			lines <- sc.Text()
		}
		close(lines)
	}()
	timeout := time.After(daemontest.Scaled(120 * time.Second))
	for said["done"] == "" {
		select {
		case l, ok := <-lines:
			if !ok {
				t.Fatalf("hostile client ended early: %v; said %v; stderr: %s", cmd.Wait(), said, stderr.String())
			}
			t.Logf("hostile client: %s", l)
			k, v, _ := strings.Cut(l, " ")
			said[k] = v + " " // "done" has no value
			if k == "punched" {
				g.check(t, "during the attack")
			}
		case <-timeout:
			t.Fatalf("hostile client did not finish within %v; said %v", daemontest.Scaled(120*time.Second), said)
		}
	}
	afterRSS, afterShm := procVmRSS(d.PID()), rssShmem(d.PID())
	t.Logf("daemon VmRSS %d -> %d MiB, RssShmem %d -> %d MiB, around the attack on %d MiB",
		beforeRSS>>20, afterRSS>>20, beforeShm>>20, afterShm>>20, holesSize>>20)

	for _, k := range []string{"refused-mr", "refused-cq"} {
		if !strings.HasPrefix(said[k], strconv.Itoa(int(unix.EFAULT))+" ") || !strings.Contains(said[k], "not allocated") {
			t.Errorf("%s: %q; want EFAULT saying the octets are not allocated", k, said[k])
		}
	}
	if !strings.HasPrefix(said["attack"], "failed ") {
		t.Errorf("the Write-Records into the punched region: %q; want them to fail", said["attack"])
	}
	if !strings.Contains(said["event"], "not present") {
		t.Errorf("the attacker's event: %q; want the QP's fatal event saying a page is not present", said["event"])
	}
	bound := int64(holesSize / 10)
	if afterRSS-beforeRSS > bound {
		t.Errorf("the daemon's VmRSS grew by %d MiB in the attack on %d MiB of holes (bound %d MiB)",
			(afterRSS-beforeRSS)>>20, holesSize>>20, bound>>20)
	}
	if n, err := strconv.Atoi(strings.TrimSpace(said["resident"])); err != nil || int64(n*unix.Getpagesize()) > bound {
		t.Errorf("the punched region holds %q pages again after the attack (bound %d MiB): the daemon allocated them",
			said["resident"], bound>>20)
	}
	d.CheckAlive(t)
	g.check(t, "after the attack")
}

// holesListenPort is TestHostileHolesRC's RC listener (doc.go: ports).
const holesListenPort = 26870

// TestHostileHolesRC: over RC between two daemons, an RDMA Write into a
// memfd region of the target's that it punched out after registering it:
// the target's daemon does not fill the holes. Its QP fails and the writer
// gets a Terminate: an RDMAP catastrophic error localized to the stream
// (remote operation error) when the daemon's own code met the hole, the
// RFC 5040 tagged base-or-bounds error (remote access error) when the
// kernel's readv into the mapping did (EFAULT); which one depends on how
// the FPDU was read (in place, or through the connection's buffer). The
// pages stay holes, a Write into the part still present was placed before,
// and both daemons live on.
func TestHostileHolesRC(t *testing.T) {
	da := daemontest.Start(t, "holes-rc-a", daemontest.Options{Ports: nextPorts()})
	db := daemontest.Start(t, "holes-rc-b", daemontest.Options{Ports: nextPorts()})
	ca, cb := da.Open(t, "holes-rc-a"), db.Open(t, "holes-rc-b")
	a := newPMEnd(t, "a", ca, ofverbs.QPTypeRC, 1<<20)
	b := newPMEnd(t, "b", cb, ofverbs.QPTypeRC, 1<<16)
	pmConnect(t, holesListenPort, b, a)
	const size = 8 << 20
	buf, err := cb.AllocBuffer(size)
	if err != nil {
		t.Fatal(err)
	}
	mem := buf.Bytes()
	mr, err := b.pd.RegMR(mem, pmAccess)
	if err != nil || mr.Process() {
		t.Fatalf("reg-mr of a Buffer: %v (process memory: %v)", err, err == nil && mr.Process())
	}
	fill(a.mem, 5)
	a.post(t, ofverbs.SendWR{ID: 1, Opcode: ofverbs.WRRDMAWrite, Signaled: true,
		SGL: []ofverbs.SGE{a.mr.SGE(a.mem)}, RemoteAddr: mr.Addr(), RKey: mr.RKey()})
	a.expect(t, a.scq, "write into the present part", ofverbs.WCSuccess)
	daemontest.Eventually(t, "write into the present part placed", 10*time.Second, func() bool {
		return bytes.Equal(mem[:len(a.mem)], a.mem)
	})
	if err := unix.Madvise(mem[size/2:], unix.MADV_REMOVE); err != nil {
		t.Fatal(err)
	}
	// A Read behind the Write is outstanding when the Terminate comes (the
	// Write itself may complete first: RC completes it once TCP took it).
	wrs := []ofverbs.SendWR{{ID: 100, Opcode: ofverbs.WRRDMAWrite, Signaled: true,
		SGL: []ofverbs.SGE{a.mr.SGE(a.mem)}, RemoteAddr: mr.Addr() + size/2, RKey: mr.RKey()},
		{ID: 101, Opcode: ofverbs.WRRDMARead, Signaled: true, SGL: []ofverbs.SGE{a.mr.SGE(a.mem[:16])},
			RemoteAddr: mr.Addr(), RKey: mr.RKey()}}
	if n, err := a.qp.PostSend(wrs); n != len(wrs) {
		t.Fatalf("post: %d, %v", n, err)
	}
	remoteErr := 0
	for k := range wrs {
		wc, err := a.wait(a.scq)
		switch {
		case err != nil:
			t.Fatalf("write into the punched part: completion %d: %v", k, err)
		case (wc.Status == ofverbs.WCRemAccessErr || wc.Status == ofverbs.WCRemOpErr) && wc.Flags&ofverbs.WCFlagTermValid != 0:
			remoteErr++
		case wc.Status == ofverbs.WCSuccess && wc.ID == 100 && remoteErr == 0:
		case wc.Status == ofverbs.WCWRFlushErr && remoteErr > 0:
		default:
			t.Fatalf("write into the punched part: completion %+v", wc)
		}
	}
	if remoteErr != 1 {
		t.Fatalf("write into the punched part: %d Terminates at the writer, want 1", remoteErr)
	}
	if n := residentPages(mem[size/2:], unix.Getpagesize()); n != 0 {
		t.Fatalf("the punched part holds %d pages again: the daemon allocated them", n)
	}
	da.CheckAlive(t)
	db.CheckAlive(t)
}

// TestHostileHolesUDReceive: a UD receive posted into a memfd region the
// client punched out after registering it: the datagram's placement (the
// kernel's copy into the mapping, or the daemon's) fails instead of
// filling the hole; the receiving QP goes to ERROR with an event saying
// why, its receive completes flushed, the pages stay holes, and the
// sender's QP and the daemon go on.
func TestHostileHolesUDReceive(t *testing.T) {
	d := daemontest.Start(t, "holes-ud", daemontest.Options{Ports: nextPorts()})
	ctx := d.Open(t, "holes-ud")
	a := newPMEnd(t, "a", ctx, ofverbs.QPTypeUD, 1<<16)
	b := newPMEnd(t, "b", ctx, ofverbs.QPTypeUD, 1<<16)
	const size = 1 << 20
	buf, err := ctx.AllocBuffer(size)
	if err != nil {
		t.Fatal(err)
	}
	mem := buf.Bytes()
	mr, err := b.pd.RegMR(mem, pmAccess)
	if err != nil || mr.Process() {
		t.Fatalf("reg-mr of a Buffer: %v", err)
	}
	if err := unix.Madvise(mem[size/2:], unix.MADV_REMOVE); err != nil {
		t.Fatal(err)
	}
	ah, err := a.pd.CreateAHTo(b.qp.Endpoint())
	if err != nil {
		t.Fatal(err)
	}
	b.postRecv(t, 7, mr.SGE(mem[size/2:size/2+8192]))
	fill(a.mem[:4096], 9)
	a.post(t, ofverbs.SendWR{ID: 1, Opcode: ofverbs.WRSend, AH: ah, Signaled: true, SGL: []ofverbs.SGE{a.mr.SGE(a.mem[:4096])}})
	a.expect(t, a.scq, "send", ofverbs.WCSuccess)
	wc, err := b.wait(b.rcq)
	if err != nil || wc.ID != 7 || wc.Status == ofverbs.WCSuccess {
		t.Fatalf("the receive into the punched part: %+v, %v; want it to fail", wc, err)
	}
	select {
	case ev := <-ctx.AsyncEvents():
		if ev.QP != b.qp || !strings.Contains(ev.Detail, "not present") {
			t.Fatalf("event %v (QP %p, want b's %p); want b's fatal event saying a page is not present", ev, ev.QP, b.qp)
		}
	case <-time.After(daemontest.Scaled(10 * time.Second)):
		t.Fatal("no asynchronous event for b's QP")
	}
	if n := residentPages(mem[size/2:], unix.Getpagesize()); n != 0 {
		t.Fatalf("the punched part holds %d pages again: the daemon allocated them", n)
	}
	// a's QP goes on: a send to a third QP.
	c := newPMEnd(t, "c", ctx, ofverbs.QPTypeUD, 1<<16)
	ahc, err := a.pd.CreateAHTo(c.qp.Endpoint())
	if err != nil {
		t.Fatal(err)
	}
	c.postRecv(t, 8, c.mr.SGE(c.mem[:4096]))
	a.post(t, ofverbs.SendWR{ID: 2, Opcode: ofverbs.WRSend, AH: ahc, Signaled: true, SGL: []ofverbs.SGE{a.mr.SGE(a.mem[:4096])}})
	a.expect(t, a.scq, "send after", ofverbs.WCSuccess)
	c.expect(t, c.rcq, "receive after", ofverbs.WCSuccess)
	if !bytes.Equal(c.mem[:4096], a.mem[:4096]) {
		t.Fatal("the message after the fault differs")
	}
	d.CheckAlive(t)
}

// TestHostileHolesUDSend: a UD Send from a memfd region the client punched
// out after registering it, on a QP without CRC (so that the first to read
// the source is the kernel's copy in sendmmsg, which fails with EFAULT
// rather than allocate the page: rnic/holeguard.go). A bad local buffer:
// the work request completes with a local protection error, as a Send from
// unmapped process memory does on UD, RD and RC (TestProcessMemory*), not a
// general error; the QP goes to ERROR with an event saying why, the pages
// stay holes, and another QP of the same client goes on.
func TestHostileHolesUDSend(t *testing.T) {
	d := daemontest.Start(t, "holes-ud-send", daemontest.Options{Ports: nextPorts()})
	ctx := d.Open(t, "holes-ud-send")
	noCRCEnd := func(name string) *pmEnd {
		e := &pmEnd{name: name, ctx: ctx}
		var err error
		if e.pd, err = ctx.AllocPD(); err != nil {
			t.Fatal(err)
		}
		if e.scq, err = ctx.CreateCQ(64, nil); err != nil {
			t.Fatal(err)
		}
		if e.rcq, err = ctx.CreateCQ(64, nil); err != nil {
			t.Fatal(err)
		}
		e.qp, err = e.pd.CreateQP(ofverbs.QPInitAttr{Type: ofverbs.QPTypeUD, SendCQ: e.scq, RecvCQ: e.rcq, NoCRC: true,
			Cap: ofverbs.QPCap{MaxSendWR: 16, MaxRecvWR: 16, MaxSendSGE: 1, MaxRecvSGE: 1}})
		if err != nil {
			t.Fatal(err)
		}
		if err := e.qp.ModifyState(ofverbs.QPStateInit, ofverbs.QPStateRTR, ofverbs.QPStateRTS); err != nil {
			t.Fatal(err)
		}
		return e
	}
	a, b := noCRCEnd("a"), noCRCEnd("b")
	const size = 1 << 20
	buf, err := ctx.AllocBuffer(size)
	if err != nil {
		t.Fatal(err)
	}
	mem := buf.Bytes()
	fill(mem, 3)
	mr, err := a.pd.RegMR(mem, pmAccess)
	if err != nil || mr.Process() {
		t.Fatalf("reg-mr of a Buffer: %v", err)
	}
	if err := unix.Madvise(mem[size/2:], unix.MADV_REMOVE); err != nil {
		t.Fatal(err)
	}
	ah, err := a.pd.CreateAHTo(b.qp.Endpoint())
	if err != nil {
		t.Fatal(err)
	}
	bmem, err := ctx.AllocBuffer(1 << 16)
	if err != nil {
		t.Fatal(err)
	}
	bmr, err := b.pd.RegMR(bmem.Bytes(), pmAccess)
	if err != nil {
		t.Fatal(err)
	}
	b.postRecv(t, 5, bmr.SGE(bmem.Bytes()[:4096]))
	// From the part still present: sent.
	a.post(t, ofverbs.SendWR{ID: 1, Opcode: ofverbs.WRSend, AH: ah, Signaled: true, SGL: []ofverbs.SGE{mr.SGE(mem[:1024])}})
	a.expect(t, a.scq, "send from present memory", ofverbs.WCSuccess)
	b.expect(t, b.rcq, "receive", ofverbs.WCSuccess)
	if !bytes.Equal(bmem.Bytes()[:1024], mem[:1024]) {
		t.Fatal("the message from present memory differs")
	}
	// From the punched part: a local protection error, and the QP fails.
	a.post(t, ofverbs.SendWR{ID: 2, Opcode: ofverbs.WRSend, AH: ah, Signaled: true, SGL: []ofverbs.SGE{mr.SGE(mem[size/2 : size/2+1024])}})
	wc := a.expect(t, a.scq, "send from the punched part", ofverbs.WCLocProtErr)
	if wc.ID != 2 || wc.Opcode != ofverbs.WCSend {
		t.Fatalf("send from the punched part: completion %+v; want work request 2, a send", wc)
	}
	select {
	case ev := <-ctx.AsyncEvents():
		if ev.QP != a.qp || !strings.Contains(ev.Detail, "not present") {
			t.Fatalf("event %v (QP %p, want a's %p); want a's fatal event saying a page is not present", ev, ev.QP, a.qp)
		}
	case <-time.After(daemontest.Scaled(10 * time.Second)):
		t.Fatal("no asynchronous event for a's QP")
	}
	if n := residentPages(mem[size/2:], unix.Getpagesize()); n != 0 {
		t.Fatalf("the punched part holds %d pages again: the daemon allocated them", n)
	}
	// Another QP of the client goes on.
	c := noCRCEnd("c")
	ahb, err := c.pd.CreateAHTo(b.qp.Endpoint())
	if err != nil {
		t.Fatal(err)
	}
	cmem, err := ctx.AllocBuffer(1 << 16)
	if err != nil {
		t.Fatal(err)
	}
	fill(cmem.Bytes(), 11)
	cmr, err := c.pd.RegMR(cmem.Bytes(), pmAccess)
	if err != nil {
		t.Fatal(err)
	}
	b.postRecv(t, 6, bmr.SGE(bmem.Bytes()[:4096]))
	c.post(t, ofverbs.SendWR{ID: 3, Opcode: ofverbs.WRSend, AH: ahb, Signaled: true, SGL: []ofverbs.SGE{cmr.SGE(cmem.Bytes()[:2048])}})
	c.expect(t, c.scq, "send after", ofverbs.WCSuccess)
	b.expect(t, b.rcq, "receive after", ofverbs.WCSuccess)
	if !bytes.Equal(bmem.Bytes()[:2048], cmem.Bytes()[:2048]) {
		t.Fatal("the message after the fault differs")
	}
	d.CheckAlive(t)
}
