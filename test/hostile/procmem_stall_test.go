package hostile

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
	"unsafe"

	"github.com/iwarpd/iwarpd/ofverbs"
	"github.com/iwarpd/iwarpd/test/daemontest"
	"golang.org/x/sys/unix"
)

// Issue 18, defect 2: no client page stalls an engine. Process-memory
// accesses run on the session's copier (verbsd/rnic/copier.go); an engine
// waits for one at most -procmem-stall-timeout.

type sendResult struct {
	snd, rcv ofverbs.WCStatus
	got      []byte
	err      error
}

// othersProceed opens a new session (hello) and runs the well-behaved
// client's exchange while the attack is under way; both must complete.
func othersProceed(t *testing.T, d *daemontest.Daemon, good *goodClient, when string) {
	t.Helper()
	c, err := ofverbs.Open(ofverbs.WithSocket(d.Sock), ofverbs.WithHelloTimeout(daemontest.Scaled(10*time.Second)), ofverbs.WithClientName("bystander-hello"))
	if err != nil {
		t.Fatalf("%s: another client's hello: %v", when, err)
	}
	c.Close()
	good.check(t, when)
}

// TestProcessMemoryFUSEStall: a process-memory MR over a FUSE mapping
// whose middle page comes only after 1.5 s (its first and last pages at
// once, so the registration passes), with -procmem-stall-timeout 300ms. A
// Send from it must not stall the daemon: other clients' hellos and
// traffic go on while it waits, the Send fails after the bound and its QP
// goes to ERROR; the session is stalled (a later Send from a resident page
// fails at once, new process registrations are refused); after three such
// stalls (three clients of one user) the user's process registrations are
// refused, while its shared buffers still register.
func TestProcessMemoryFUSEStall(t *testing.T) {
	d := daemontest.Start(t, "pm-fuse", daemontest.Options{Ports: nextPorts(),
		Extra: []string{"-socket-mode", "0666", "-procmem-stall-timeout", "300ms"}})
	noPtrace(t, d)
	openSocket(t, d)
	dir := startStallFS(t) // after Start: its cleanup (the server killed) runs before the daemon stops
	good := newGoodClient(t, d)
	good.check(t, "before")
	for strike := 1; strike <= 3; strike++ {
		c := spawnHostileAs(t, otherUID, "pm-fuse-client", d.Sock, filepath.Join(dir, fmt.Sprintf("f%d", strike)))
		line := func(what string) string {
			t.Helper()
			l, err := readLine(c)
			if err != nil {
				t.Fatalf("strike %d: %s: %v: %s", strike, what, err, c.stderr)
			}
			return l
		}
		if l := line("posting"); l != "posting" {
			t.Fatalf("strike %d: client said %q", strike, l)
		}
		othersProceed(t, d, good, fmt.Sprintf("strike %d: while a Send waits on a page that does not come", strike))
		if l := line("the Send"); l == "send success" || !strings.HasPrefix(l, "send ") {
			t.Fatalf("strike %d: the Send over the late page: %q", strike, l)
		}
		if l := line("a Send from a resident page"); l == "again success" || !strings.HasPrefix(l, "again ") {
			t.Fatalf("strike %d: a Send from a resident page of the stalled session: %q", strike, l)
		}
		if l := line("a new registration"); !strings.HasPrefix(l, "reg ") || !strings.Contains(l, "stalled") {
			t.Fatalf("strike %d: a process registration in the stalled session: %q", strike, l)
		}
		c.kill()
	}
	log := d.Stderr.String()
	if !strings.Contains(log, "did not finish within") || !strings.Contains(log, "moved to ERROR") {
		t.Fatalf("no log line says what happened:\n%s", log)
	}
	c := spawnHostileAs(t, otherUID, "pm-fuse-refused", d.Sock, "")
	if c.info != "ok" {
		t.Fatalf("after three strikes: %s", c.info)
	}
	othersProceed(t, d, good, "after three strikes")
	d.CheckAlive(t)
}

// readLine reads the next line a helper prints after "ready" (bounded).
func readLine(p *hostileProc) (string, error) {
	c := make(chan string, 1)
	go func() {
		l, _ := p.out.ReadString('\n')
		c <- strings.TrimSpace(l)
	}()
	select {
	case l := <-c:
		if l == "" {
			return "", errors.New("the helper ended")
		}
		return l, nil
	case <-time.After(daemontest.Scaled(20 * time.Second)):
		return "", errors.New("no line within 20 s")
	}
}

func init() {
	helpers["pm-fuse-client"] = helperFUSEClient
	helpers["pm-fuse-refused"] = helperFUSERefused
}

// helperFUSEClient maps the FUSE file IWARPD_HOSTILE_ARG, registers it
// and says "ready"; then "posting", and one line per step: "send STATUS"
// (the Send over the late page), "again STATUS" (a Send from its first
// page, resident), "reg ERROR" (registering heap memory). Everything the
// steps need is made before the Send: while the daemon waits in its page,
// this process's own address-space operations wait too.
func helperFUSEClient() int {
	fd, err := unix.Open(os.Getenv(envArg), unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return helperFail("%v", err)
	}
	mem, err := unix.Mmap(fd, 0, fuseFileSize, unix.PROT_READ, unix.MAP_SHARED)
	unix.Close(fd)
	if err != nil {
		return helperFail("%v", err)
	}
	if mem[0] != 'F' || mem[2*pmPage] != 'F' { // never touch page 1
		return helperFail("the FUSE file reads %q, %q", mem[0], mem[2*pmPage])
	}
	ctx, err := ofverbs.Open(ofverbs.WithSocket(os.Getenv(envSock)), ofverbs.WithClientName("pm-fuse"))
	if err != nil {
		return helperFail("%v", err)
	}
	p, err := newPMProbe(ctx)
	if err != nil {
		return helperFail("%v", err)
	}
	if p.mr, err = p.pd.RegMR(mem, 0); err != nil { // read-only: the probe reads the first and last octets
		return helperFail("registering the FUSE mapping: %v", err)
	}
	own := make([]byte, pmPage)
	helperReady()
	fmt.Println("posting")
	snd, _, _, err := p.send(mem)
	if err != nil {
		return helperFail("%v", err)
	}
	fmt.Println("send", snd)
	snd, _, _, err = p.send(mem[:pmPage])
	if err != nil {
		return helperFail("%v", err)
	}
	fmt.Println("again", snd)
	_, err = p.pd.RegMR(own, ofverbs.AccessLocalWrite)
	fmt.Println("reg", err)
	sleepLifetime()
	return 0
}

// helperFUSERefused: after three strikes of this user, registering heap
// memory is refused until an hour later; a shared buffer registers.
func helperFUSERefused() int {
	ctx, err := ofverbs.Open(ofverbs.WithSocket(os.Getenv(envSock)), ofverbs.WithClientName("pm-fuse-refused"))
	if err != nil {
		return helperFail("%v", err)
	}
	pd, err := ctx.AllocPD()
	if err != nil {
		return helperFail("%v", err)
	}
	_, err = pd.RegMR(make([]byte, pmPage), ofverbs.AccessLocalWrite)
	var e *ofverbs.Error
	if !errors.As(err, &e) || e.Errno != unix.EPERM || !strings.Contains(e.Msg, "refused until") {
		helperReady(fmt.Sprintf("FAIL a process registration after three strikes: %v", err))
		return 0
	}
	buf, err := ctx.AllocBuffer(pmPage)
	if err == nil {
		_, err = pd.RegMR(buf.Bytes(), ofverbs.AccessLocalWrite)
	}
	if err != nil {
		helperReady(fmt.Sprintf("FAIL a shared buffer after three strikes: %v", err))
		return 0
	}
	helperReady("ok")
	return 0
}

// uffdio structures (include/uapi/linux/userfaultfd.h).
type uffdioAPI struct{ api, features, ioctls uint64 }
type uffdioRegister struct{ start, len, mode, ioctls uint64 }

const (
	uffdAPI               = 0xaa
	uffdioAPIIoctl        = 0xc018aa3f
	uffdioRegisterIoctl   = 0xc020aa00
	uffdioRegisterMissing = 1
)

// TestProcessMemoryUserfaultfd: a process-memory MR whose middle page is
// behind a userfaultfd nobody serves (first and last pages present, so the
// registration passes; the test runs as root, so the userfaultfd is not
// limited to user-mode faults). A Send from it fails — /proc/PID/mem
// reaches such a page without waiting for it (the kernel answers EIO), and
// were it to wait, the copier's bound would end it — and other clients'
// hellos and traffic go on meanwhile.
func TestProcessMemoryUserfaultfd(t *testing.T) {
	d := daemontest.Start(t, "pm-uffd", daemontest.Options{Ports: nextPorts()})
	noPtrace(t, d)
	uffd, _, errno := unix.Syscall(unix.SYS_USERFAULTFD, unix.O_CLOEXEC|unix.O_NONBLOCK, 0, 0)
	if errno != 0 {
		t.Skipf("userfaultfd: %v", errno)
	}
	t.Cleanup(func() { unix.Close(int(uffd)) })
	api := uffdioAPI{api: uffdAPI}
	if _, _, errno := unix.Syscall(unix.SYS_IOCTL, uffd, uffdioAPIIoctl, uintptr(unsafe.Pointer(&api))); errno != 0 {
		t.Fatalf("UFFDIO_API: %v", errno)
	}
	mem, err := unix.Mmap(-1, 0, 3*pmPage, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { unix.Munmap(mem) })
	mem[0], mem[2*pmPage] = 'U', 'U' // present; page 1 never is
	reg := uffdioRegister{start: uint64(uintptr(unsafe.Pointer(&mem[pmPage]))), len: pmPage, mode: uffdioRegisterMissing}
	if _, _, errno := unix.Syscall(unix.SYS_IOCTL, uffd, uffdioRegisterIoctl, uintptr(unsafe.Pointer(&reg))); errno != 0 {
		t.Fatalf("UFFDIO_REGISTER: %v", errno)
	}
	good := newGoodClient(t, d)
	good.check(t, "before")
	ctx := d.Open(t, "pm-uffd")
	p, err := newPMProbe(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := p.reg(mem); err != nil {
		t.Fatalf("registering the userfaultfd range: %v", err)
	}
	res := make(chan sendResult, 1)
	go func() {
		snd, rcv, got, err := p.send(mem)
		res <- sendResult{snd, rcv, got, err}
	}()
	othersProceed(t, d, good, "while a Send reads a userfaultfd page nobody serves")
	r := <-res
	if r.err != nil {
		t.Fatal(r.err)
	}
	if r.snd == ofverbs.WCSuccess {
		t.Fatalf("the Send over the userfaultfd page succeeded (receive %v)", r.rcv)
	}
	othersProceed(t, d, good, "after")
	d.CheckAlive(t)
}
