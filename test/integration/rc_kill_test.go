package integration

import (
	"bufio"
	"fmt"
	"io"
	"net/netip"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/iwarpd/iwarpd/internal/pinfork"
	"github.com/iwarpd/iwarpd/ofverbs"
	"github.com/iwarpd/iwarpd/test/daemontest"
)

// The test binary as an RC streamer (IWARPD_RC_HELPER=streamer): it
// connects an RC QP to the listener at IWARPD_INTEGRATION_PEER through the
// daemon at IWARPD_INTEGRATION_SOCKET and writes 16 MiB RDMA Writes to
// STag IWARPD_RC_RKEY at IWARPD_RC_RADDR back to back, printing "ready"
// after the first one completed, until killed (or a minute passed).
const (
	rcHelperEnv = "IWARPD_RC_HELPER"
	rcRKeyEnv   = "IWARPD_RC_RKEY"
	rcRAddrEnv  = "IWARPD_RC_RADDR"
	rcStreamLen = 16 << 20
)

func init() {
	if os.Getenv(rcHelperEnv) == "streamer" {
		if err := rcStreamer(); err != nil {
			fmt.Fprintln(os.Stderr, "streamer:", err)
			os.Exit(1)
		}
		os.Exit(0)
	}
}

func rcStreamer() error {
	peer, err := netip.ParseAddrPort(os.Getenv(helperPeerEnv))
	if err != nil {
		return err
	}
	rkey, err := strconv.ParseUint(os.Getenv(rcRKeyEnv), 0, 32)
	if err != nil {
		return err
	}
	raddr, err := strconv.ParseUint(os.Getenv(rcRAddrEnv), 0, 64)
	if err != nil {
		return err
	}
	ctx, err := ofverbs.Open(ofverbs.WithSocket(os.Getenv(helperSocketEnv)), ofverbs.WithClientName("rc-streamer"))
	if err != nil {
		return err
	}
	pd, err := ctx.AllocPD()
	if err != nil {
		return err
	}
	buf, err := ctx.AllocBuffer(rcStreamLen)
	if err != nil {
		return err
	}
	mr, err := pd.RegMR(buf.Bytes(), ofverbs.AccessLocalWrite)
	if err != nil {
		return err
	}
	cq, err := ctx.CreateCQ(16, nil)
	if err != nil {
		return err
	}
	qp, err := pd.CreateQP(ofverbs.QPInitAttr{Type: ofverbs.QPTypeRC, SendCQ: cq, RecvCQ: cq,
		Cap: ofverbs.QPCap{MaxSendWR: 4, MaxRecvWR: 1, MaxSendSGE: 1, MaxRecvSGE: 1}})
	if err != nil {
		return err
	}
	if err := qp.ModifyState(ofverbs.QPStateInit); err != nil {
		return err
	}
	if err := qp.Connect(peer, ofverbs.ConnParam{Timeout: 10 * time.Second}); err != nil {
		return err
	}
	fillPattern(buf.Bytes(), 3)
	wr := ofverbs.SendWR{Opcode: ofverbs.WRRDMAWrite, SGL: []ofverbs.SGE{mr.SGE(buf.Bytes())}, RKey: uint32(rkey),
		RemoteAddr: raddr, Signaled: true}
	wcs := make([]ofverbs.WC, 4)
	end := time.Now().Add(time.Minute)
	for k := 0; time.Now().Before(end); k++ {
		wr.ID = uint64(k)
		if n, err := qp.PostSend([]ofverbs.SendWR{wr}); n != 1 {
			return err
		}
		for {
			n, err := cq.Poll(wcs)
			if err != nil {
				return err
			}
			if n > 0 {
				if wcs[0].Err() != nil {
					return wcs[0].Err()
				}
				break
			}
			if time.Now().After(end) {
				return nil
			}
			time.Sleep(100 * time.Microsecond)
		}
		if k == 0 {
			fmt.Println("ready")
			os.Stdout.Sync()
		}
	}
	return nil
}

// TestRCPeerKilledMidTransfer: a client process streaming 16 MiB RDMA
// Writes to a survivor's RC QP is killed with SIGKILL. The survivor's QP
// goes to ERROR, its posted receives are flushed (WCWRFlushErr), it gets
// CMDisconnected, all within bounded time; both daemons live on.
func TestRCPeerKilledMidTransfer(t *testing.T) {
	da, db := startRCDaemons(t, "rckill", daemontest.Options{})
	ctxA := da.Open(t, "survivor")
	srv := newRCEP(t, "survivor", ctxA, rcStreamLen, rcAccessAll)
	for i := range 4 {
		if err := srv.postRecv(uint64(100+i), srv.scratch()[i*256:(i+1)*256]); err != nil {
			t.Fatal(err)
		}
	}
	l := listenOn(t, ctxA, 0)
	accepted := make(chan error, 1)
	go func() {
		req, err := l.GetRequest(scaled(20 * time.Second))
		if err != nil {
			accepted <- err
			return
		}
		accepted <- req.Accept(srv.qp, ofverbs.ConnParam{})
	}()

	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(exe, "-test.run=^$")
	cmd.Env = append(cleanEnv(), rcHelperEnv+"=streamer", helperSocketEnv+"="+db.Sock, helperPeerEnv+"="+l.Addr().String(),
		fmt.Sprintf("%s=%#x", rcRKeyEnv, srv.mr.RKey()), fmt.Sprintf("%s=%#x", rcRAddrEnv, srv.mr.SGE(srv.dst()).Addr))
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	stderr := &lockedBuffer{}
	cmd.Stderr = stderr
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := pinfork.Start(cmd); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	ready := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(stdout)
		if sc.Scan() {
			ready <- sc.Text()
		}
		close(ready)
		io.Copy(io.Discard, stdout)
		cmd.Wait()
		close(done)
	}()
	t.Cleanup(func() {
		cmd.Process.Kill()
		<-done
	})
	select {
	case err := <-accepted:
		if err != nil {
			t.Fatalf("accept: %v\n%s", err, stderr)
		}
	case <-time.After(scaled(30 * time.Second)):
		t.Fatalf("no connection from the streamer\n%s", stderr)
	}
	select {
	case line := <-ready:
		if strings.TrimSpace(line) != "ready" {
			t.Fatalf("streamer said %q\n%s", line, stderr)
		}
	case <-time.After(scaled(30 * time.Second)):
		t.Fatalf("streamer not ready\n%s", stderr)
	}
	time.Sleep(50 * time.Millisecond) // in the middle of a 16 MiB Write
	if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	select {
	case <-done:
	case <-time.After(scaled(10 * time.Second)):
		t.Fatal("streamer still running after SIGKILL")
	}
	if err := waitQPState(srv, ofverbs.QPStateError, 15*time.Second); err != nil {
		t.Fatal(err)
	}
	for i := range 4 {
		wc, err := srv.pollWC(srv.rcq, 10*time.Second)
		if err != nil {
			t.Fatalf("receive %d: %v", i, err)
		}
		if wc.ID != uint64(100+i) || wc.Status != ofverbs.WCWRFlushErr {
			t.Errorf("receive completion %+v (%v), want ID %d flushed", wc, wc.Err(), 100+i)
		}
	}
	if ev, err := waitCM(srv, ofverbs.CMDisconnected, 10*time.Second); err != nil {
		t.Error(err)
	} else {
		t.Logf("survivor: %v errno %v %s, %v after the kill", ev.Type, ev.Errno, ev.Detail, time.Since(start))
	}
	// A work request posted now is flushed too, promptly.
	if err := srv.post(ofverbs.SendWR{ID: 9, Opcode: ofverbs.WRSend, SGL: []ofverbs.SGE{srv.mr.SGE(srv.src()[:10])}, Signaled: true}); err != nil {
		t.Fatal(err)
	}
	if wc, err := srv.pollWC(srv.scq, 10*time.Second); err != nil || wc.ID != 9 || wc.Status != ofverbs.WCWRFlushErr {
		t.Errorf("send after the kill: %+v (%v), want flushed", wc, err)
	}
	da.CheckAlive(t)
	db.CheckAlive(t)
}
