package cclient

import (
	"bufio"
	"bytes"
	"context"
	"io"
	"reflect"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/iwarpd/iwarpd/proto"
	"github.com/iwarpd/iwarpd/test/daemontest"
)

// mustPass checks that a program's output ends with PASS and logs it.
func mustPass(t *testing.T, name, out string) {
	t.Helper()
	t.Logf("%s:\n%s", name, out)
	if !strings.HasSuffix(strings.TrimSpace(out), "PASS") {
		t.Fatalf("%s did not finish (no PASS)", name)
	}
}

// TestSession: Hello, a version mismatch, the default socket rules, device
// and port queries, and every object created and destroyed (t_session.c).
func TestSession(t *testing.T) {
	needC(t)
	a, _ := pair(t)
	mustPass(t, "t_session", runC(t, "t_session", a, nil))
}

// TestDatagram: UD and RD send/receive with source addresses, inline,
// scatter, an SRQ and the completion channel (t_ud.c).
func TestDatagram(t *testing.T) {
	needC(t)
	a, b := pair(t)
	mustPass(t, "t_ud", runC(t, "t_ud", a, b))
}

// TestRC: connection management and RC Send/Write/Read (t_rc.c).
func TestRC(t *testing.T) {
	needC(t)
	a, b := pair(t)
	mustPass(t, "t_rc", runC(t, "t_rc", a, b))
}

// TestBadInput: bad input is a negative errno, never a crash (t_badinput.c).
func TestBadInput(t *testing.T) {
	needC(t)
	a, _ := pair(t)
	mustPass(t, "t_badinput", runC(t, "t_badinput", a, nil))
}

// TestDaemonKilled: SIGKILL the daemon under a live C session: every call
// fails with ENODEV, blocked waiters return, no SIGPIPE (t_dead.c).
func TestDaemonKilled(t *testing.T) {
	needC(t)
	a, _ := pair(t)
	ctx, cancel := context.WithTimeout(context.Background(), daemontest.Scaled(60*time.Second))
	defer cancel()
	cmd := cmdC(ctx, t, "t_dead", a, nil)
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdoutPipe, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	rd := bufio.NewReader(stdoutPipe)
	line, err := rd.ReadString('\n')
	if err != nil || strings.TrimSpace(line) != "READY" {
		cmd.Wait()
		t.Fatalf("t_dead did not get ready: %q %v\n%s", line, err, stderr.String())
	}
	if err := a.Cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	a.Stop() // marks it as stopped on purpose and reaps it
	io.WriteString(stdin, "killed\n")
	stdin.Close()
	rest, _ := io.ReadAll(rd)
	if err := cmd.Wait(); err != nil {
		t.Fatalf("t_dead: %v\nstdout:\n%s\nstderr:\n%s", err, rest, stderr.String())
	}
	mustPass(t, "t_dead", string(rest))
}

// TestProcessMR: memory the application owns (heap, stack, static) is
// registered in the process form of RegMRRequest and works as a local
// buffer and as the target of remote RDMA Write and Read (t_procmr.c).
//
// PENDING MERGE: the daemon serves the process form once proto has
// RegMRRequest.Process (another helper's branch). Until main has that field
// the test skips; from then on it must pass.
func TestProcessMR(t *testing.T) {
	needC(t)
	if _, ok := reflect.TypeOf(proto.RegMRRequest{}).FieldByName("Process"); !ok {
		t.Skip("proto.RegMRRequest has no Process field yet (pending merge of the application-memory work): the daemon rejects the process form")
	}
	a, b := pair(t)
	mustPass(t, "t_procmr", runC(t, "t_procmr", a, b))
}

// TestQueueShare: several threads post to one send queue, one receive
// queue, and poll one CQ at once (t_qshare.c), under ASan+UBSan; every
// work request completes exactly once.
func TestQueueShare(t *testing.T) {
	needC(t)
	a, _ := pair(t)
	mustPass(t, "t_qshare", runC(t, "t_qshare", a, nil))
}

// TestQueueShareTSan runs t_qshare and t_threads built with
// ThreadSanitizer: the per-queue locks and the session mutex leave no data
// race.
func TestQueueShareTSan(t *testing.T) {
	needC(t)
	if tsanBuild == "" {
		t.Skip(tsanSkip)
	}
	a, _ := pair(t)
	for _, name := range []string{"t_qshare", "t_threads"} {
		mustPass(t, name, runCIn(t, tsanBuild, name, a, nil))
	}
}

// TestThreads: control calls from several threads at once, beside blocked
// event waiters and a data-path thread (t_threads.c).
func TestThreads(t *testing.T) {
	needC(t)
	a, _ := pair(t)
	mustPass(t, "t_threads", runC(t, "t_threads", a, nil))
}
