package hostile

import (
	"bytes"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"unsafe"

	"github.com/iwarpd/iwarpd/ofverbs"
	"github.com/iwarpd/iwarpd/proto"
	"github.com/iwarpd/iwarpd/test/daemontest"
	"golang.org/x/sys/unix"
)

// Issue 18, defect 1: process memory must never reach further than the
// client could itself. The daemon reaches a session's process memory only
// through the /proc/PID/mem the client opened and handed over at hello
// (docs/memory-registration.md), and runs without CAP_SYS_PTRACE
// (daemontest drops it, as the systemd unit does). Each attack runs as an
// unprivileged user beside a well-behaved client that is checked
// unaffected.

// noPtrace checks that d runs without CAP_SYS_PTRACE.
func noPtrace(t *testing.T, d *daemontest.Daemon) {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", d.PID()))
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, "CapEff:"); ok {
			caps, err := strconv.ParseUint(strings.TrimSpace(v), 16, 64)
			if err != nil {
				t.Fatal(err)
			}
			if caps&(1<<unix.CAP_SYS_PTRACE) != 0 {
				t.Fatalf("the daemon runs with CAP_SYS_PTRACE (CapEff %#x): the attacks must be tried without it", caps)
			}
			return
		}
	}
	t.Fatal("no CapEff in the daemon's status")
}

// pmSecretC is the setuid-root helper: it maps a page at the address of
// argv[1] (hex), fills it with 4096 random octets, says "secret EUID PID
// HEX" (the first 16 octets), and answers "check" on stdin with "intact" or
// "changed".
const pmSecretC = `#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/random.h>
#include <unistd.h>
int main(int argc, char **argv)
{
	static unsigned char copy[4096];
	if (argc < 2)
		return 2;
	void *want = (void *)strtoul(argv[1], NULL, 16);
	unsigned char *p = mmap(want, 4096, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED_NOREPLACE, -1, 0);
	if (p != want || getrandom(copy, sizeof copy, 0) != sizeof copy) {
		printf("fail\n");
		return 1;
	}
	memcpy(p, copy, sizeof copy);
	printf("secret %d %d ", (int)geteuid(), (int)getpid());
	for (int i = 0; i < 16; i++)
		printf("%02x", p[i]);
	printf("\n");
	fflush(stdout);
	char line[64];
	while (fgets(line, sizeof line, stdin)) {
		if (strncmp(line, "check", 5) == 0) {
			printf("%s\n", memcmp(p, copy, sizeof copy) == 0 ? "intact" : "changed");
			fflush(stdout);
		}
	}
	return 0;
}
`

// buildSetuidHelper compiles pmSecretC into a directory uid otherUID can
// reach and makes it setuid root.
func buildSetuidHelper(t *testing.T) string {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root to install a setuid-root helper")
	}
	cc, err := exec.LookPath("cc")
	if err != nil {
		t.Skip("needs a C compiler (cc) for the setuid helper")
	}
	dir := t.TempDir()
	openDirs(t, dir)
	src, bin := filepath.Join(dir, "pmsecret.c"), filepath.Join(dir, "pmsecret")
	if err := os.WriteFile(src, []byte(pmSecretC), 0o644); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command(cc, "-O1", "-Wall", "-o", bin, src).CombinedOutput(); err != nil {
		t.Fatalf("building the setuid helper: %v\n%s", err, out)
	}
	if err := os.Chown(bin, 0, 0); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(bin, 0o755|os.ModeSetuid); err != nil {
		t.Fatal(err)
	}
	return bin
}

func init() {
	helpers["pm-setuid"] = helperSetuid
	helpers["pm-nodump-victim"] = helperNoDumpVictim
	helpers["pm-nodump-attack"] = helperNoDumpAttack
	helpers["pm-oracle"] = helperOracle
}

// TestProcessMemorySetuidExec: an unprivileged client holds a session
// whose process memory is a child's address space (it opened the child's
// /proc/PID/mem, as it may: same user), registers a page of it and reads it
// through the daemon; then the child execs a setuid-root program that
// holds a secret at the same address. The daemon reads and writes nothing
// of it: the Send from the MR fails, a receive into it fails, a new
// registration fails, the secret never arrives and stays unchanged; a
// session of the parent's own (the child kept the socket) reaches only the
// parent's memory at that address.
func TestProcessMemorySetuidExec(t *testing.T) {
	helper := buildSetuidHelper(t)
	d := daemontest.Start(t, "pm-setuid", daemontest.Options{Ports: nextPorts(), Extra: []string{"-socket-mode", "0666"}})
	noPtrace(t, d)
	openSocket(t, d)
	good := newGoodClient(t, d)
	good.check(t, "before the attack")
	a := spawnHostileAs(t, otherUID, "pm-setuid", d.Sock, helper)
	if strings.HasPrefix(a.info, "skip") {
		t.Skip(a.info)
	}
	if a.info != "ok" {
		t.Fatalf("setuid attack: %s", a.info)
	}
	good.check(t, "after the attack")
	d.CheckAlive(t)
}

// helperSetuid is the attack of TestProcessMemorySetuidExec; it says
// "ready ok", "ready skip WHY" or "ready FAIL WHY".
func helperSetuid() int {
	verdict := setuidAttack(os.Getenv(envSock), os.Getenv(envArg))
	helperReady(verdict)
	return 0
}

func setuidAttack(sock, helper string) string {
	m, err := startMapper(pmAddrExec, 'C')
	if err != nil {
		return "FAIL " + err.Error()
	}
	defer m.kill()
	memFD, err := unix.Open(fmt.Sprintf("/proc/%d/mem", m.pid), unix.O_RDWR|unix.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Sprintf("FAIL opening the child's (same user's) /proc/%d/mem: %v", m.pid, err)
	}
	defer unix.Close(memFD)
	local, err := mapAt(pmAddrExec, pmPage)
	if err != nil {
		return "FAIL " + err.Error()
	}
	for i := range local {
		local[i] = 'A'
	}
	ctx, err := ofverbs.Open(ofverbs.WithSocket(sock), ofverbs.WithProcessMemFD(memFD), ofverbs.WithClientName("pm-setuid"))
	if err != nil {
		return "FAIL open: " + err.Error()
	}
	defer ctx.Close()
	p, err := newPMProbe(ctx)
	if err == nil {
		err = p.reg(local)
	}
	if err != nil {
		return "FAIL registering the child's page: " + err.Error()
	}
	snd, rcv, got, err := p.send(local)
	if err != nil || snd != ofverbs.WCSuccess || rcv != ofverbs.WCSuccess || bytes.Count(got, []byte{'C'}) != pmPage {
		return fmt.Sprintf("FAIL the child's page before exec: send %v, receive %v, %q..., %v", snd, rcv, got[:min(len(got), 8)], err)
	}

	// The child execs the setuid-root helper: same pid, a new (root's)
	// address space with a secret at the same address.
	if err := m.say("exec " + helper); err != nil {
		return "FAIL " + err.Error()
	}
	l, err := m.line()
	if err != nil {
		return "FAIL the setuid helper: " + err.Error()
	}
	var euid, pid int
	var secretHex string
	if _, err := fmt.Sscanf(l, "secret %d %d %s", &euid, &pid, &secretHex); err != nil {
		return fmt.Sprintf("FAIL the setuid helper said %q", l)
	}
	if euid != 0 {
		return fmt.Sprintf("skip the setuid helper runs as euid %d (a nosuid file system?)", euid)
	}
	secret, _ := hex.DecodeString(secretHex)
	if pid != m.pid {
		return fmt.Sprintf("FAIL the helper's pid %d is not the child's %d", pid, m.pid)
	}
	// The kernel refuses this user the helper's memory: so must the daemon.
	if fd, err := unix.Open(fmt.Sprintf("/proc/%d/mem", pid), unix.O_RDONLY|unix.O_CLOEXEC, 0); err == nil {
		unix.Close(fd)
		return "FAIL the kernel let an unprivileged user open a setuid-root process's memory (test setup?)"
	}
	snd, rcv, got, err = p.send(local)
	if err != nil {
		return "FAIL " + err.Error()
	}
	if bytes.Contains(got, secret) {
		return "FAIL the setuid helper's secret arrived through the daemon"
	}
	if snd == ofverbs.WCSuccess {
		return fmt.Sprintf("FAIL a Send from the exec'd address space succeeded (receive %v, %q...)", rcv, got[:8])
	}
	if st, err := p.recv(local, 'W'); err != nil || st == ofverbs.WCSuccess {
		return fmt.Sprintf("FAIL a receive into the exec'd address space: %v, %v", st, err)
	}
	if mr, err := p.pd.RegMR(local, ofverbs.AccessLocalWrite); err == nil {
		mr.Close()
		return "FAIL a new registration in the exec'd address space succeeded"
	}
	// The parent's own session (the literal attack: the child kept the
	// socket; the parent registers the helper's range): only the parent's
	// memory at that address.
	own, err := ofverbs.Open(ofverbs.WithSocket(sock), ofverbs.WithClientName("pm-setuid-own"))
	if err != nil {
		return "FAIL open: " + err.Error()
	}
	defer own.Close()
	p2, err := newPMProbe(own)
	if err == nil {
		err = p2.reg(local)
	}
	if err != nil {
		return "FAIL registering the parent's own page: " + err.Error()
	}
	snd, rcv, got, err = p2.send(local)
	if err != nil || snd != ofverbs.WCSuccess || rcv != ofverbs.WCSuccess || bytes.Count(got, []byte{'A'}) != pmPage {
		return fmt.Sprintf("FAIL the parent's own page: send %v, receive %v, %q..., %v", snd, rcv, got[:min(len(got), 8)], err)
	}
	if err := m.say("check"); err != nil {
		return "FAIL " + err.Error()
	}
	if l, err := m.line(); err != nil || l != "intact" {
		return fmt.Sprintf("FAIL the setuid helper's secret: %q %v", l, err)
	}
	return "ok"
}

// TestProcessMemoryNonDumpable: a non-dumpable process (PR_SET_DUMPABLE 0,
// as ssh-agent) of the same unprivileged user holds a secret; another
// process of that user cannot open its memory, and registering the
// secret's address through the daemon reaches only the attacker's own
// memory (or fails where the attacker has none).
func TestProcessMemoryNonDumpable(t *testing.T) {
	d := daemontest.Start(t, "pm-nodump", daemontest.Options{Ports: nextPorts(), Extra: []string{"-socket-mode", "0666"}})
	noPtrace(t, d)
	openSocket(t, d)
	good := newGoodClient(t, d)
	good.check(t, "before the attack")
	v := spawnHostileAs(t, otherUID, "pm-nodump-victim", d.Sock, "")
	a := spawnHostileAs(t, otherUID, "pm-nodump-attack", d.Sock, v.info)
	if a.info != "ok" {
		t.Fatalf("non-dumpable attack: %s", a.info)
	}
	good.check(t, "after the attack")
	d.CheckAlive(t)
}

// helperNoDumpVictim maps two pages at pmAddrNoDump holding a random
// secret, becomes non-dumpable and says "ready PID HEX" (the secret's
// first 16 octets).
func helperNoDumpVictim() int {
	page, err := mapAt(pmAddrNoDump, 2*pmPage)
	if err != nil {
		return helperFail("%v", err)
	}
	if _, err := unix.Getrandom(page, 0); err != nil {
		return helperFail("%v", err)
	}
	if err := unix.Prctl(unix.PR_SET_DUMPABLE, 0, 0, 0, 0); err != nil {
		return helperFail("PR_SET_DUMPABLE: %v", err)
	}
	helperReady(strconv.Itoa(os.Getpid()), hex.EncodeToString(page[:16]))
	sleepLifetime()
	return 0
}

func helperNoDumpAttack() int {
	helperReady(noDumpAttack(os.Getenv(envSock), os.Getenv(envArg)))
	return 0
}

func noDumpAttack(sock, arg string) string {
	var pid int
	var secretHex string
	if _, err := fmt.Sscanf(arg, "%d %s", &pid, &secretHex); err != nil {
		return fmt.Sprintf("FAIL argument %q", arg)
	}
	secret, _ := hex.DecodeString(secretHex)
	if fd, err := unix.Open(fmt.Sprintf("/proc/%d/mem", pid), unix.O_RDONLY|unix.O_CLOEXEC, 0); err == nil {
		unix.Close(fd)
		return "FAIL the kernel let this user open a non-dumpable process's memory (test setup?)"
	}
	local, err := mapAt(pmAddrNoDump, pmPage) // the victim's first page only
	if err != nil {
		return "FAIL " + err.Error()
	}
	for i := range local {
		local[i] = 'A'
	}
	ctx, err := ofverbs.Open(ofverbs.WithSocket(sock), ofverbs.WithClientName("pm-nodump"))
	if err != nil {
		return "FAIL open: " + err.Error()
	}
	defer ctx.Close()
	p, err := newPMProbe(ctx)
	if err == nil {
		err = p.reg(local)
	}
	if err != nil {
		return "FAIL registering the attacker's own page: " + err.Error()
	}
	snd, rcv, got, err := p.send(local)
	if err != nil || snd != ofverbs.WCSuccess || rcv != ofverbs.WCSuccess || bytes.Count(got, []byte{'A'}) != pmPage {
		return fmt.Sprintf("FAIL the attacker's own page: send %v, receive %v, %q..., %v", snd, rcv, got[:min(len(got), 8)], err)
	}
	if bytes.Contains(got, secret) {
		return "FAIL the non-dumpable process's secret arrived"
	}
	// The victim's second page: nothing of the attacker's there.
	second := unsafe.Slice((*byte)(unsafe.Add(unsafe.Pointer(&local[0]), pmPage)), pmPage)
	if mr, err := p.pd.RegMR(second, ofverbs.AccessLocalWrite); err == nil {
		mr.Close()
		return "FAIL registered the non-dumpable process's page"
	}
	return "ok"
}

// sleepLifetime keeps a victim helper alive until the test kills it.
func sleepLifetime() {
	var ts unix.Timespec
	ts.Sec = int64(helperLifetime().Seconds())
	unix.Nanosleep(&ts, nil)
}

// TestProcessMemoryPidReuse: a session's process memory belongs to a
// process that exited; the pid is then given to another process (written
// to ns_last_pid until the kernel hands the same pid out again). Nothing of
// the new process is touched, however the session accesses the old MR.
func TestProcessMemoryPidReuse(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root to steer pid allocation (ns_last_pid)")
	}
	d := daemontest.Start(t, "pm-reuse", daemontest.Options{Ports: nextPorts()})
	noPtrace(t, d)
	good := newGoodClient(t, d)
	good.check(t, "before")
	m, err := startMapper(pmAddrReuse, 'C')
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(m.kill)
	memFD, err := unix.Open(fmt.Sprintf("/proc/%d/mem", m.pid), unix.O_RDWR|unix.O_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(memFD)
	local, err := mapAt(pmAddrReuse, pmPage)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { unix.Munmap(local) })
	ctx, err := ofverbs.Open(ofverbs.WithSocket(d.Sock), ofverbs.WithProcessMemFD(memFD), ofverbs.WithClientName("pm-reuse"))
	if err != nil {
		t.Fatal(err)
	}
	defer ctx.Close()
	p, err := newPMProbe(ctx)
	if err == nil {
		err = p.reg(local)
	}
	if err != nil {
		t.Fatal(err)
	}
	if snd, rcv, got, err := p.send(local); err != nil || snd != ofverbs.WCSuccess || rcv != ofverbs.WCSuccess || bytes.Count(got, []byte{'C'}) != pmPage {
		t.Fatalf("the first process's page: send %v, receive %v, %v", snd, rcv, err)
	}
	oldPid := m.pid
	m.kill()
	var n *mapperProc
	reused := false
	for try := 0; try < 200 && !reused; try++ {
		if n != nil {
			n.kill()
		}
		os.WriteFile("/proc/sys/kernel/ns_last_pid", []byte(strconv.Itoa(oldPid-1)), 0)
		if n, err = startMapper(pmAddrReuse, 'N'); err != nil {
			t.Fatal(err)
		}
		reused = n.pid == oldPid
	}
	t.Cleanup(n.kill)
	if !reused {
		t.Logf("pid %d was not handed out again in 200 tries (other processes fork meanwhile); checking against pid %d", oldPid, n.pid)
	}
	if snd, _, got, err := p.send(local); err != nil || snd == ofverbs.WCSuccess || bytes.Contains(got, bytes.Repeat([]byte{'N'}, 64)) {
		t.Fatalf("a Send from the exited process's memory: %v (%v)", snd, err)
	}
	if st, err := p.recv(local, 'W'); err != nil || st == ofverbs.WCSuccess {
		t.Fatalf("a receive into the exited process's memory: %v (%v)", st, err)
	}
	if mr, err := p.pd.RegMR(local, ofverbs.AccessLocalWrite); err == nil {
		mr.Close()
		t.Fatal("registered memory of an exited process")
	}
	if err := n.say("check"); err != nil {
		t.Fatal(err)
	}
	if l, err := n.line(); err != nil || l != "intact" {
		t.Fatalf("the process now at the pid: %q %v", l, err)
	}
	good.check(t, "after")
	d.CheckAlive(t)
}

// TestProcessMemoryNoOracle: a client learns nothing about memory that is
// not its own. A registration at an address another user's process has
// mapped (this root test process) fails exactly as at an address nobody
// has mapped; the other process's /proc/PID/mem cannot be opened; and a
// descriptor that is not a /proc/PID/mem open for reading and writing is
// refused at hello with an error that says what to hand over.
func TestProcessMemoryNoOracle(t *testing.T) {
	d := daemontest.Start(t, "pm-oracle", daemontest.Options{Ports: nextPorts(), Extra: []string{"-socket-mode", "0666"}})
	noPtrace(t, d)
	openSocket(t, d)
	good := newGoodClient(t, d)
	good.check(t, "before the attack")
	page, err := mapAt(pmAddrOracle, pmPage)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { unix.Munmap(page) })
	copy(page, "the root test process's own page")
	a := spawnHostileAs(t, otherUID, "pm-oracle", d.Sock, strconv.Itoa(os.Getpid()))
	if a.info != "ok" {
		t.Fatalf("oracle attack: %s", a.info)
	}
	good.check(t, "after the attack")
	d.CheckAlive(t)
}

func helperOracle() int {
	helperReady(oracleAttack(os.Getenv(envSock), os.Getenv(envArg)))
	return 0
}

func oracleAttack(sock, victim string) string {
	if fd, err := unix.Open("/proc/"+victim+"/mem", unix.O_RDONLY|unix.O_CLOEXEC, 0); err == nil {
		unix.Close(fd)
		return "FAIL opened another user's /proc/PID/mem (test setup?)"
	}
	ctx, err := ofverbs.Open(ofverbs.WithSocket(sock), ofverbs.WithClientName("pm-oracle"))
	if err != nil {
		return "FAIL open: " + err.Error()
	}
	defer ctx.Close()
	pd, err := ctx.AllocPD()
	if err != nil {
		return "FAIL " + err.Error()
	}
	answer := func(addr uintptr) string {
		// Never dereferenced: only its address is registered.
		b := unsafe.Slice((*byte)(*(*unsafe.Pointer)(unsafe.Pointer(&addr))), pmPage)
		mr, err := pd.RegMR(b, ofverbs.AccessLocalWrite)
		if err == nil {
			mr.Close()
			return "registered"
		}
		var e *ofverbs.Error
		if !errors.As(err, &e) {
			return err.Error()
		}
		msg := strings.ReplaceAll(e.Msg, fmt.Sprintf("%#x", addr+pmPage), "END")
		return fmt.Sprintf("%v %s", e.Errno, strings.ReplaceAll(msg, fmt.Sprintf("%#x", addr), "ADDR"))
	}
	mapped, nowhere := answer(pmAddrOracle), answer(pmAddrNowhere)
	if mapped == "registered" || mapped != nowhere {
		return fmt.Sprintf("FAIL another process's mapped page answers %q, an unmapped one %q", mapped, nowhere)
	}
	// Descriptors that are no /proc/PID/mem for reading and writing.
	mfd, err := unix.MemfdCreate("not-mem", unix.MFD_CLOEXEC)
	if err != nil {
		return "FAIL " + err.Error()
	}
	defer unix.Close(mfd)
	ro, err := unix.Open("/proc/self/mem", unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return "FAIL " + err.Error()
	}
	defer unix.Close(ro)
	for _, c := range []struct {
		fd   int
		want string
	}{{mfd, "not on procfs"}, {ro, "not open for reading and writing"}} {
		if err := rawHelloFD(sock, c.fd); err == nil || !strings.Contains(err.Error(), c.want) {
			return fmt.Sprintf("FAIL hello with a wrong descriptor: %v, want an error saying %q", err, c.want)
		}
	}
	return "ok"
}

// rawHelloFD says hello with HelloRequest.ProcessMem and fd as descriptor 0.
func rawHelloFD(sock string, fd int) error {
	c, err := proto.Dial(sock)
	if err != nil {
		return err
	}
	defer c.Close()
	if err := c.Send(proto.Header{Version: proto.ABIVersion, Op: proto.OpHello, Seq: 1},
		proto.HelloRequest{ABI: proto.ABIVersion, Client: "pm-oracle", ProcessMem: true}, fd); err != nil {
		return err
	}
	h, body, fds, err := c.Receive()
	for _, f := range fds {
		unix.Close(f)
	}
	if err != nil {
		return err
	}
	if h.Status != 0 {
		return fmt.Errorf("%v: %s", h.Status, body)
	}
	return nil
}
