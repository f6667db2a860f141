package integration

import (
	"bufio"
	"fmt"
	"io"
	"net/netip"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/iwarpd/iwarpd/internal/pinfork"
	"github.com/iwarpd/iwarpd/ofverbs"
)

// The test binary doubles as a client process that can be killed: with
// IWARPD_INTEGRATION_HELPER=victim it opens a session on
// IWARPD_INTEGRATION_SOCKET, creates one of every object (PD, buffer, two
// MRs, completion channel, CQs, SRQ, two UD QPs in RTS, AH), posts
// receives, prints "ready QP1ADDR QP2ADDR", and then sends a 100-octet
// message to IWARPD_INTEGRATION_PEER (an ofverbs.Endpoint) every 2 ms until its stdin closes (the
// test process died) or a minute passed.

const (
	helperSocketEnv = "IWARPD_INTEGRATION_SOCKET"
	helperPeerEnv   = "IWARPD_INTEGRATION_PEER"
)

func runHelper(mode string) int {
	if mode != "victim" {
		fmt.Fprintf(os.Stderr, "unknown helper mode %q\n", mode)
		return 2
	}
	if err := victim(os.Getenv(helperSocketEnv), os.Getenv(helperPeerEnv)); err != nil {
		fmt.Fprintln(os.Stderr, "victim:", err)
		return 1
	}
	return 0
}

func victim(sock, peer string) error {
	peerEP, err := ofverbs.ParseEndpoint(peer)
	if err != nil {
		return err
	}
	ctx, err := ofverbs.Open(ofverbs.WithSocket(sock), ofverbs.WithClientName("victim"))
	if err != nil {
		return err
	}
	pd, err := ctx.AllocPD()
	if err != nil {
		return err
	}
	buf, err := ctx.AllocBuffer(1 << 20)
	if err != nil {
		return err
	}
	mem := buf.Bytes()
	mr, err := pd.RegMR(mem[:1<<19], ofverbs.AccessLocalWrite)
	if err != nil {
		return err
	}
	if _, err := pd.RegMR(mem[1<<19:], ofverbs.AccessLocalWrite); err != nil {
		return err
	}
	ch, err := ctx.CreateCompChannel()
	if err != nil {
		return err
	}
	scq, err := ctx.CreateCQ(64, nil)
	if err != nil {
		return err
	}
	rcq, err := ctx.CreateCQ(64, ch)
	if err != nil {
		return err
	}
	if err := rcq.ReqNotify(false); err != nil {
		return err
	}
	srq, err := pd.CreateSRQ(ofverbs.SRQInitAttr{MaxWR: 16, MaxSGE: 1})
	if err != nil {
		return err
	}
	caps := ofverbs.QPCap{MaxSendWR: 32, MaxRecvWR: 16, MaxSendSGE: 1, MaxRecvSGE: 1}
	qp1, err := pd.CreateQP(ofverbs.QPInitAttr{Type: ofverbs.QPTypeUD, SendCQ: scq, RecvCQ: rcq, Cap: caps})
	if err != nil {
		return err
	}
	qp2, err := pd.CreateQP(ofverbs.QPInitAttr{Type: ofverbs.QPTypeUD, SendCQ: scq, RecvCQ: rcq, SRQ: srq, Cap: caps})
	if err != nil {
		return err
	}
	for _, qp := range []*ofverbs.QP{qp1, qp2} {
		if err := qp.ModifyState(ofverbs.QPStateInit, ofverbs.QPStateRTR, ofverbs.QPStateRTS); err != nil {
			return err
		}
	}
	for i := range 8 {
		sge := []ofverbs.SGE{mr.SGE(mem[4096*(i+1) : 4096*(i+2)])}
		if _, err := qp1.PostRecv([]ofverbs.RecvWR{{ID: uint64(i), SGL: sge}}); err != nil {
			return err
		}
		if _, err := srq.PostRecv([]ofverbs.RecvWR{{ID: uint64(100 + i), SGL: sge}}); err != nil {
			return err
		}
	}
	ah, err := pd.CreateAHTo(peerEP)
	if err != nil {
		return err
	}
	copy(mem, strings.Repeat("victim! ", 13))
	fmt.Printf("ready %v %v\n", qp1.Addr(), qp2.Addr())
	os.Stdout.Sync()

	stdinClosed := make(chan struct{})
	go func() {
		io.Copy(io.Discard, os.Stdin)
		close(stdinClosed)
	}()
	wcs := make([]ofverbs.WC, 16)
	tick := time.NewTicker(2 * time.Millisecond)
	defer tick.Stop()
	end := time.After(time.Minute)
	for k := uint64(0); ; k++ {
		select {
		case <-stdinClosed:
			return nil
		case <-end:
			return nil
		case <-tick.C:
		}
		if _, err := qp1.PostSend([]ofverbs.SendWR{{ID: k, SGL: []ofverbs.SGE{mr.SGE(mem[:100])}, AH: ah, Signaled: true}}); err != nil {
			return err
		}
		if _, err := scq.Poll(wcs); err != nil {
			return err
		}
	}
}

// helperProc is a running victim.
type helperProc struct {
	cmd   *exec.Cmd
	stdin io.WriteCloser
	addrs [2]netip.AddrPort
	done  chan struct{}
}

// startVictim runs the test binary in victim mode against sock, sending to
// peer, and waits (bounded) for its "ready" line.
func startVictim(t *testing.T, sock string, peer ofverbs.Endpoint) *helperProc {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(exe, "-test.run=^$")
	cmd.Env = append(cleanEnv(), helperEnv+"=victim", helperSocketEnv+"="+sock, helperPeerEnv+"="+peer.String())
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	stderr := &lockedBuffer{}
	cmd.Stderr = stderr
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := pinfork.Start(cmd); err != nil {
		t.Fatal(err)
	}
	h := &helperProc{cmd: cmd, stdin: stdin, done: make(chan struct{})}
	lines := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(stdout)
		if sc.Scan() {
			lines <- sc.Text()
		}
		close(lines)
		io.Copy(io.Discard, stdout)
		cmd.Wait()
		close(h.done)
	}()
	t.Cleanup(func() {
		stdin.Close()
		cmd.Process.Kill()
		<-h.done
	})
	select {
	case line, ok := <-lines:
		f := strings.Fields(line)
		if !ok || len(f) != 3 || f[0] != "ready" {
			t.Fatalf("victim did not get ready: %q\n%s", line, stderr)
		}
		for i := range 2 {
			if h.addrs[i], err = netip.ParseAddrPort(f[1+i]); err != nil {
				t.Fatalf("victim said %q: %v", line, err)
			}
		}
	case <-time.After(scaled(20 * time.Second)):
		t.Fatalf("victim not ready within %v\n%s", scaled(20*time.Second), stderr)
	}
	return h
}

// kill sends SIGKILL and waits for the process.
func (h *helperProc) kill(t *testing.T) {
	t.Helper()
	if err := h.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	select {
	case <-h.done:
	case <-time.After(scaled(10 * time.Second)):
		t.Fatal("victim still running after SIGKILL")
	}
}
