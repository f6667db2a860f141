package hostile

import (
	"bufio"
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/iwarpd/iwarpd/internal/pinfork"
	"github.com/iwarpd/iwarpd/ofverbs"
	"github.com/iwarpd/iwarpd/test/daemontest"
)

// bystander is the well-behaved client beside an attack: one session, two
// UD QPs, exchanging verified messages one at a time with a pause between
// them (longer than the daemon's poll window, so the engine sleeps and
// every message needs the doorbell) until stopped.
type bystander struct {
	rounds atomic.Int64
	stop   chan struct{}
	done   chan struct{}
	err    error
}

// startBystander opens the well-behaved client on d; cleanup stops it.
func startBystander(t *testing.T, d *daemontest.Daemon) *bystander {
	t.Helper()
	ctx := d.Open(t, "bystander")
	pd, err := ctx.AllocPD()
	if err != nil {
		t.Fatal(err)
	}
	buf, err := ctx.AllocBuffer(2 * 256)
	if err != nil {
		t.Fatal(err)
	}
	mem := buf.Bytes()
	mr, err := pd.RegMR(mem, ofverbs.AccessLocalWrite)
	if err != nil {
		t.Fatal(err)
	}
	mk := func() (*ofverbs.QP, *ofverbs.CQ, *ofverbs.CQ) {
		scq, err := ctx.CreateCQ(16, nil)
		if err != nil {
			t.Fatal(err)
		}
		rcq, err := ctx.CreateCQ(16, nil)
		if err != nil {
			t.Fatal(err)
		}
		q, err := pd.CreateQP(ofverbs.QPInitAttr{Type: ofverbs.QPTypeUD, SendCQ: scq, RecvCQ: rcq,
			Cap: ofverbs.QPCap{MaxSendWR: 8, MaxRecvWR: 8, MaxSendSGE: 1, MaxRecvSGE: 1}})
		if err != nil {
			t.Fatal(err)
		}
		if err := q.ModifyState(ofverbs.QPStateInit, ofverbs.QPStateRTR, ofverbs.QPStateRTS); err != nil {
			t.Fatal(err)
		}
		return q, scq, rcq
	}
	a, ascq, _ := mk()
	b, _, brcq := mk()
	ah, err := pd.CreateAHTo(b.Endpoint())
	if err != nil {
		t.Fatal(err)
	}
	src, dst := mem[:256], mem[256:]
	by := &bystander{stop: make(chan struct{}), done: make(chan struct{})}
	wcs := make([]ofverbs.WC, 1)
	// wait polls cq for one completion, bounded.
	wait := func(cq *ofverbs.CQ, what string) (ofverbs.WC, error) {
		deadline := time.Now().Add(daemontest.Scaled(10 * time.Second))
		for i := 0; i < 1_000_000; i++ {
			n, err := cq.Poll(wcs)
			if err != nil {
				return ofverbs.WC{}, err
			}
			if n == 1 {
				return wcs[0], wcs[0].Err()
			}
			if time.Now().After(deadline) {
				break
			}
			time.Sleep(50 * time.Microsecond)
		}
		return ofverbs.WC{}, fmt.Errorf("bystander: no %s completion within %v (the engine stopped serving it)", what, daemontest.Scaled(10*time.Second))
	}
	go func() {
		defer close(by.done)
		for k := uint64(0); ; k++ {
			select {
			case <-by.stop:
				return
			default:
			}
			if _, err := b.PostRecv([]ofverbs.RecvWR{{ID: k, SGL: []ofverbs.SGE{mr.SGE(dst)}}}); err != nil {
				by.err = fmt.Errorf("bystander: post receive %d: %w", k, err)
				return
			}
			binary.LittleEndian.PutUint64(src, k)
			for i := 8; i < len(src); i++ {
				src[i] = byte(k) + byte(i)
			}
			if _, err := a.PostSend([]ofverbs.SendWR{{ID: k, Opcode: ofverbs.WRSend, AH: ah, Signaled: true,
				SGL: []ofverbs.SGE{mr.SGE(src)}}}); err != nil {
				by.err = fmt.Errorf("bystander: post send %d: %w", k, err)
				return
			}
			if _, err := wait(ascq, "send"); err != nil {
				by.err = fmt.Errorf("bystander: send %d: %w", k, err)
				return
			}
			wc, err := wait(brcq, "receive")
			if err != nil {
				by.err = fmt.Errorf("bystander: receive %d: %w", k, err)
				return
			}
			if wc.ID != k || wc.ByteLen != uint32(len(src)) || !bytes.Equal(dst, src) {
				by.err = fmt.Errorf("bystander: message %d arrived wrong: %+v", k, wc)
				return
			}
			clear(dst)
			by.rounds.Add(1)
			time.Sleep(2 * time.Millisecond) // let the engine fall asleep
		}
	}()
	t.Cleanup(by.end)
	return by
}

func (by *bystander) end() {
	select {
	case <-by.stop:
	default:
		close(by.stop)
	}
	<-by.done
}

// progressed fails t unless the bystander completes more rounds (bounded
// wait) and never failed.
func (by *bystander) progressed(t *testing.T, phase string) {
	t.Helper()
	from := by.rounds.Load()
	deadline := time.Now().Add(daemontest.Scaled(20 * time.Second))
	for i := 0; i < 100000; i++ {
		select {
		case <-by.done:
			t.Fatalf("the well-behaved client failed during %s: %v", phase, by.err)
		default:
		}
		if by.rounds.Load() >= from+10 {
			return
		}
		if time.Now().After(deadline) {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Fatalf("the well-behaved client made %d rounds in %v during %s (want 10): the daemon stopped serving it",
		by.rounds.Load()-from, daemontest.Scaled(20*time.Second), phase)
}

// hostileProc is a hostile client: this test binary re-executed in a
// helper mode (helpers map), on the daemon's socket.
type hostileProc struct {
	cmd    *exec.Cmd
	out    *bufio.Reader
	stderr *daemontest.Buffer
	exited chan struct{}
	info   string // what the helper said after "ready"
}

// Environment of a helper process.
const (
	envSock = "IWARPD_HOSTILE_SOCK" // the daemon's control socket
	envArg  = "IWARPD_HOSTILE_ARG"  // a mode-specific argument
)

// spawnHostile starts helper mode on sock and waits (bounded) for its
// "ready [info]" line; cleanup kills it. p.info is what follows "ready".
func spawnHostile(t *testing.T, mode, sock, arg string) *hostileProc {
	t.Helper()
	return spawnHostileCmd(t, mode, sock, arg, os.Args[0], nil)
}

func spawnHostileCmd(t *testing.T, mode, sock, arg, bin string, cred *syscall.Credential, env ...string) *hostileProc {
	t.Helper()
	return spawnHostileWrapped(t, mode, sock, arg, nil, bin, cred, env...)
}

// spawnHostileWrapped is spawnHostileCmd with the helper run by wrapper
// (a command and its arguments before the binary: ip netns exec, setpriv).
func spawnHostileWrapped(t *testing.T, mode, sock, arg string, wrapper []string, bin string, cred *syscall.Credential, env ...string) *hostileProc {
	t.Helper()
	cmd := exec.Command(bin, "-test.run=^$")
	if len(wrapper) > 0 {
		cmd = exec.Command(wrapper[0], append(wrapper[1:], bin, "-test.run=^$")...)
	}
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "XDG_RUNTIME_DIR=") && !strings.HasPrefix(kv, "IWARPD_SOCKET=") && !strings.HasPrefix(kv, "TMPDIR=") {
			cmd.Env = append(cmd.Env, kv)
		}
	}
	cmd.Env = append(cmd.Env, helperEnv+"="+mode, envSock+"="+sock, envArg+"="+arg)
	cmd.Env = append(cmd.Env, env...)
	p := &hostileProc{cmd: cmd, stderr: &daemontest.Buffer{}, exited: make(chan struct{})}
	cmd.Stderr = p.stderr
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL, Credential: cred}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	p.out = bufio.NewReader(stdout)
	if err := pinfork.Start(cmd); err != nil {
		t.Fatalf("starting hostile helper %s: %v", mode, err)
	}
	t.Cleanup(func() { p.kill() })
	lines := make(chan string, 1)
	go func() {
		l, _ := p.out.ReadString('\n')
		lines <- l
	}()
	go func() { cmd.Wait(); close(p.exited) }()
	select {
	case l := <-lines:
		rest, ok := strings.CutPrefix(strings.TrimSpace(l), "ready")
		if !ok {
			<-p.exited
			t.Fatalf("hostile helper %s did not get ready (said %q): %s", mode, l, p.stderr)
		}
		p.info = strings.TrimSpace(rest)
	case <-time.After(daemontest.Scaled(20 * time.Second)):
		t.Fatalf("hostile helper %s: not ready within %v: %s", mode, daemontest.Scaled(20*time.Second), p.stderr)
	}
	return p
}

func (p *hostileProc) kill() {
	select {
	case <-p.exited:
		return
	default:
	}
	p.cmd.Process.Kill()
	<-p.exited
}

// helperReady tells spawnHostile that the attack is running (info: what
// the test needs to know, on the same line).
func helperReady(info ...string) { fmt.Println(strings.Join(append([]string{"ready"}, info...), " ")) }

// helperFail reports a helper's setup failure (exit status 1).
func helperFail(format string, a ...any) int {
	fmt.Fprintf(os.Stderr, "hostile helper: "+format+"\n", a...)
	return 1
}

// helperLifetime bounds how long a helper attacks before giving up.
func helperLifetime() time.Duration { return daemontest.Scaled(2 * time.Minute) }

// ctl runs iwarpctl on sock (bounded) and returns its output and exit
// status.
func ctl(t *testing.T, sock string, args ...string) (string, int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), daemontest.Scaled(20*time.Second))
	defer cancel()
	cmd := exec.CommandContext(ctx, daemontest.Bins["iwarpctl"], append([]string{"-socket", sock}, args...)...)
	cmd.Env = daemontest.CleanEnv()
	out, err := cmd.CombinedOutput()
	if ctx.Err() != nil {
		t.Fatalf("iwarpctl %v did not finish within %v (the daemon hangs?): %s", args, daemontest.Scaled(20*time.Second), out)
	}
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		return string(out), ee.ExitCode()
	}
	if err != nil {
		t.Fatalf("iwarpctl: %v", err)
	}
	return string(out), 0
}

// Unprivileged hostile clients run as this uid (no passwd entry needed).
const otherUID = 1001

// spawnHostileAs is spawnHostile as uid (the test runs as root): the test
// binary is copied where uid may run it. sock must be reachable by uid
// (openSocket).
func spawnHostileAs(t *testing.T, uid int, mode, sock, arg string) *hostileProc {
	t.Helper()
	return spawnHostileAsEnv(t, uid, mode, sock, arg)
}

// spawnHostileAsEnv is spawnHostileAs with more environment; it drops
// XDG_RUNTIME_DIR and IWARPD_SOCKET, so a helper sees the default socket
// that env (TMPDIR) implies.
func spawnHostileAsEnv(t *testing.T, uid int, mode, sock, arg string, env ...string) *hostileProc {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root to run a hostile client as another user")
	}
	dir := t.TempDir()
	openDirs(t, dir)
	b, err := os.ReadFile(os.Args[0])
	if err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(dir, "hostile.test")
	if err := os.WriteFile(bin, b, 0o755); err != nil {
		t.Fatal(err)
	}
	return spawnHostileCmd(t, mode, sock, arg, bin, &syscall.Credential{Uid: uint32(uid), Gid: uint32(uid)}, env...)
}

// openDirs makes dir and its parents up to the temporary directory 0755.
func openDirs(t *testing.T, dir string) {
	t.Helper()
	for ; dir != "/" && dir != os.TempDir(); dir = filepath.Dir(dir) {
		if err := os.Chmod(dir, 0o755); err != nil {
			t.Fatal(err)
		}
	}
}

// openSocket lets other users reach d's control socket: its directories
// become 0755 (the socket itself is made with -socket-mode 0666).
func openSocket(t *testing.T, d *daemontest.Daemon) {
	t.Helper()
	openDirs(t, filepath.Dir(d.Sock))
}
