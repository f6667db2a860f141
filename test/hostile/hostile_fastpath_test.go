package hostile

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/iwarpd/iwarpd/internal/pinfork"
	"github.com/iwarpd/iwarpd/ofverbs"
	"github.com/iwarpd/iwarpd/proto"
	"github.com/iwarpd/iwarpd/test/daemontest"
)

// A rank that lies in its UD QP's fast-path page (proto/fastpath.go,
// verbsd/rnic/fastpath.go, docs/fastpath.md), run as another user
// (c/tests/t_fpown.c): one that keeps Busy set forever, one that writes
// garbage over the page, one that claims the socket while the engine owns
// it. Its own QP stalls (Busy) or fails (the others); another session's
// QPs on the same engine keep flowing, and the daemon lives.

// fpRank is a t_fpown run as a user.
type fpRank struct {
	cmd    *exec.Cmd
	in     io.WriteCloser
	stderr *daemontest.Buffer
	exited chan error
	addr   netip.AddrPort
	qkey   uint32
}

func startFPRank(t *testing.T, uid int, sock string, args ...string) *fpRank {
	t.Helper()
	return startFPProg(t, "t_fpown", uid, sock, args...)
}

// startFPProg runs the C test program name as uid against sock and reads
// its "ready ADDR QKEY" line.
func startFPProg(t *testing.T, name string, uid int, sock string, args ...string) *fpRank {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root to run a hostile client as another user")
	}
	built := daemontest.CProgram(t, name)
	dir := t.TempDir()
	openDirs(t, dir)
	b, err := os.ReadFile(built)
	if err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(dir, name)
	if err := os.WriteFile(bin, b, 0o755); err != nil {
		t.Fatal(err)
	}
	p := &fpRank{cmd: exec.Command(bin, append([]string{sock}, args...)...), stderr: &daemontest.Buffer{}, exited: make(chan error, 1)}
	p.cmd.Env = daemontest.CleanEnv()
	if s := os.Getenv("IWARPD_TEST_TIMEOUT_SCALE"); s != "" {
		p.cmd.Env = append(p.cmd.Env, "IWARPD_TEST_TIMEOUT_SCALE="+s)
	}
	p.cmd.Stderr = p.stderr
	p.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL, Credential: &syscall.Credential{Uid: uint32(uid), Gid: uint32(uid)}}
	if p.in, err = p.cmd.StdinPipe(); err != nil {
		t.Fatal(err)
	}
	out, err := p.cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := pinfork.Start(p.cmd); err != nil {
		t.Fatal(err)
	}
	go func() { p.exited <- p.cmd.Wait() }()
	t.Cleanup(func() {
		p.cmd.Process.Kill()
		<-p.exited
		p.exited <- nil
	})
	lines := make(chan string, 1)
	go func() {
		l, _ := bufio.NewReader(out).ReadString('\n')
		lines <- l
	}()
	select {
	case l := <-lines:
		f := strings.Fields(l)
		if len(f) != 3 || f[0] != "ready" {
			t.Fatalf("t_fpown %v (uid %d) said %q: %s", args, uid, l, p.stderr)
		}
		ap, err := netip.ParseAddrPort(f[1])
		qk, err2 := strconv.ParseUint(f[2], 10, 32)
		if err != nil || err2 != nil {
			t.Fatalf("t_fpown: %q", l)
		}
		p.addr, p.qkey = ap, uint32(qk)
	case <-time.After(daemontest.Scaled(time.Minute)):
		t.Fatalf("t_fpown %v: not ready within %v: %s", args, daemontest.Scaled(time.Minute), p.stderr)
	}
	return p
}

// finish lets the program destroy its QP and end; it must exit 0 (no
// sanitizer report: the daemon's answers stayed sane).
func (p *fpRank) finish(t *testing.T) {
	t.Helper()
	fmt.Fprintln(p.in, "quit")
	p.in.Close()
	select {
	case err := <-p.exited:
		p.exited <- err
		if err != nil {
			t.Errorf("t_fpown: %v: %s", err, p.stderr)
		}
	case <-time.After(daemontest.Scaled(time.Minute)):
		t.Errorf("t_fpown did not end: %s", p.stderr)
	}
}

// fastpathRow returns the daemon's QP with a fast-path page (iwarpctl).
func fastpathRow(t *testing.T, sock string) proto.QPInfo {
	t.Helper()
	out, code := ctl(t, sock, "-json", "qps")
	if code != 0 {
		t.Fatalf("iwarpctl -json qps: exit %d: %s", code, out)
	}
	var rows []proto.QPInfo
	if err := json.Unmarshal([]byte(out), &rows); err != nil {
		t.Fatalf("iwarpctl -json qps: %v\n%s", err, out)
	}
	var fp []proto.QPInfo
	for _, r := range rows {
		if r.Fastpath != "" {
			fp = append(fp, r)
		}
	}
	if len(fp) != 1 {
		t.Fatalf("iwarpctl: %d QPs with a fast-path page, want 1:\n%s", len(fp), out)
	}
	return fp[0]
}

func TestFastpathHostileRank(t *testing.T) {
	d := daemontest.Start(t, "fastpath", daemontest.Options{Ports: nextPorts(), Extra: []string{"-socket-mode", "0666", "-engines", "1"}})
	openSocket(t, d)
	by := startBystander(t, d)

	// The sender: a session of root's on the same engine.
	ctx := d.Open(t, "sender")
	pd, err := ctx.AllocPD()
	if err != nil {
		t.Fatal(err)
	}
	buf, err := ctx.AllocBuffer(4096)
	if err != nil {
		t.Fatal(err)
	}
	mr, err := pd.RegMR(buf.Bytes(), ofverbs.AccessLocalWrite)
	if err != nil {
		t.Fatal(err)
	}
	scq, err := ctx.CreateCQ(64, nil)
	if err != nil {
		t.Fatal(err)
	}
	sq, err := pd.CreateQP(ofverbs.QPInitAttr{Type: ofverbs.QPTypeUD, SendCQ: scq, RecvCQ: scq,
		Cap: ofverbs.QPCap{MaxSendWR: 32, MaxRecvWR: 1, MaxSendSGE: 1, MaxRecvSGE: 1}})
	if err != nil {
		t.Fatal(err)
	}
	if err := sq.ModifyState(ofverbs.QPStateInit, ofverbs.QPStateRTR, ofverbs.QPStateRTS); err != nil {
		t.Fatal(err)
	}
	send := func(to netip.AddrPort, qkey uint32, n int) {
		t.Helper()
		ah, err := pd.CreateAHTo(ofverbs.Endpoint{Addr: to, QKey: qkey})
		if err != nil {
			t.Fatal(err)
		}
		wcs := make([]ofverbs.WC, 8)
		for i := range n {
			if k, err := sq.PostSend([]ofverbs.SendWR{{ID: uint64(i), Opcode: ofverbs.WRSend, AH: ah, Signaled: true,
				SGL: []ofverbs.SGE{mr.SGE(buf.Bytes()[:8])}}}); k != 1 {
				t.Fatalf("sender: post send: %v", err)
			}
			deadline := time.Now().Add(daemontest.Scaled(10 * time.Second))
			for j := 0; j < 1e6; j++ {
				k, err := scq.Poll(wcs)
				if err != nil || (k == 1 && wcs[0].Status != ofverbs.WCSuccess) {
					t.Fatalf("sender: %v %+v", err, wcs[0])
				}
				if k == 1 || time.Now().After(deadline) {
					break
				}
				time.Sleep(50 * time.Microsecond)
			}
			time.Sleep(time.Millisecond) // past the lease now and then
		}
	}

	t.Run("busy", func(t *testing.T) {
		p := startFPRank(t, otherUID, d.Sock, "busy")
		send(p.addr, p.qkey, 20)
		by.progressed(t, "a rank keeping Busy set")
		var q proto.QPInfo
		daemontest.Eventually(t, "the engine's take-over of the busy rank's socket", 20*time.Second, func() bool {
			q = fastpathRow(t, d.Sock)
			return q.Counters["fastpath_takeovers"] >= 1 && q.Counters["fastpath_busy_skips"] >= 1
		})
		if q.Fastpath != "taking" || q.Counters["datagrams_in"] != 0 || q.State != "RTS" {
			t.Errorf("busy rank's QP: %+v: want it stalled (taking, nothing read, RTS)", q)
		}
		p.finish(t)
	})
	for _, mode := range [][]string{{"garbage", "7"}, {"claim"}} {
		t.Run(mode[0], func(t *testing.T) {
			p := startFPRank(t, otherUID, d.Sock, mode...)
			send(p.addr, p.qkey, 20)
			by.progressed(t, "a rank lying in its page ("+mode[0]+")")
			var q proto.QPInfo
			daemontest.Eventually(t, "the lying rank's QP failing", 20*time.Second, func() bool {
				q = fastpathRow(t, d.Sock)
				return q.State == "ERROR"
			})
			if q.Fastpath != "off" || q.Counters["fastpath_violations"] != 1 {
				t.Errorf("lying rank's QP: %+v: want the fast path off after one violation", q)
			}
			p.finish(t)
		})
	}
	t.Run("rqlie", func(t *testing.T) {
		// The rank leaves an impossible receive-queue consumer index
		// (beyond the producer's) and stops renewing: at the take-over
		// the engine refuses to adopt it and fails that QP alone
		// (docs/fastpath.md "Posted receives").
		p := startFPRank(t, otherUID, d.Sock, "rqlie")
		send(p.addr, p.qkey, 5)
		by.progressed(t, "a rank lying in its receive queue's consumer index")
		var q proto.QPInfo
		daemontest.Eventually(t, "the lying rank's QP failing", 20*time.Second, func() bool {
			q = fastpathRow(t, d.Sock)
			return q.State == "ERROR"
		})
		if q.Counters["wr_errors"] < 1 || q.Counters["fastpath_violations"] != 0 {
			t.Errorf("QP %+v: want ERROR through wr_errors, not a page violation", q)
		}
		if !strings.Contains(d.Stderr.String(), "receive queue's consumer index") {
			t.Errorf("the daemon's log does not say why the QP failed")
		}
		p.finish(t)
	})
	t.Run("refuse", func(t *testing.T) {
		// fastpath-page refuses a second page, no QP, no Magic, an
		// unsealed page, a QP with the daemon's socket, an RD QP (the
		// program checks each errno, then a good page is taken).
		p := startFPRank(t, otherUID, d.Sock, "refuse")
		p.finish(t)
	})
	for seed := range 3 {
		t.Run(fmt.Sprintf("chaos-%d", seed), func(t *testing.T) {
			// Random words, legal and not, while datagrams arrive: the
			// QP ends in a state the protocol knows, the others flow.
			p := startFPRank(t, otherUID, d.Sock, "chaos", strconv.Itoa(seed+1))
			send(p.addr, p.qkey, 60)
			by.progressed(t, "a rank writing random words")
			q := fastpathRow(t, d.Sock)
			switch {
			case q.Fastpath != "rank" && q.Fastpath != "daemon" && q.Fastpath != "taking" && q.Fastpath != "off":
				t.Errorf("QP %+v: unknown fast-path state", q)
			case (q.Counters["fastpath_violations"] > 0) != (q.Fastpath == "off") || (q.Fastpath == "off" && q.State != "ERROR"):
				t.Errorf("QP %+v: a violation must end the fast path and fail the QP, and only a violation", q)
			}
			t.Logf("chaos %d: %s %s %v", seed+1, q.State, q.Fastpath, q.Counters)
			p.finish(t)
		})
	}
	by.progressed(t, "after the lying ranks")
	if !d.Alive() {
		t.Fatal("the daemon died")
	}
	if log := d.Stderr.String(); !strings.Contains(log, "fast-path page's owner word") {
		t.Errorf("the daemon's log does not say why the QPs failed:\n%s", log)
	}
}
