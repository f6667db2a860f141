package hostile

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/iwarpd/iwarpd/internal/pinfork"
	"github.com/iwarpd/iwarpd/ofverbs"
	"github.com/iwarpd/iwarpd/test/daemontest"
	"golang.org/x/sys/unix"
)

// Issue 13, point 5: limits per Unix user. A hostile process of another
// user takes all it may of each limit and is refused the next with EDQUOT
// and a message naming the configuration key; a well-behaved client of
// root beside it is unaffected (its own user is not the hostile one's);
// once the hostile process exits, everything it held is given back (a
// second run gets exactly as far).

// The limits the test daemon runs with, and the uid of the hostile user.
const (
	limSessions   = 4
	limQPs        = 3
	limPorts      = 2
	limListeners  = 2
	limRegistered = 1 << 20
	hostileUID    = 4242
	// TCP listener ports of the hostile user.
	limListenBase = 26860
)

var limitFlags = []string{
	"-user-max-sessions", fmt.Sprint(limSessions), "-user-max-qp", fmt.Sprint(limQPs),
	"-user-max-ports", fmt.Sprint(limPorts), "-user-max-listeners", fmt.Sprint(limListeners),
	"-user-max-registered-bytes", fmt.Sprint(limRegistered), "-socket-mode", "0666",
}

func init() { helpers["user-limits"] = helperUserLimits }

// wantQuota checks that err is EDQUOT naming key.
func wantQuota(what string, err error, key string) error {
	var ve *ofverbs.Error
	if !errors.As(err, &ve) || ve.Errno != unix.EDQUOT || !strings.Contains(ve.Msg, key) {
		return fmt.Errorf("%s: %v; want EDQUOT naming %s", what, err, key)
	}
	return nil
}

// helperUserLimits runs as the hostile user: it takes every limit to its
// end. Exit 0: every limit held exactly where configured.
func helperUserLimits() int {
	sock := os.Getenv(sockEnv)
	var errs []error
	check := func(err error) {
		if err != nil {
			errs = append(errs, err)
		}
	}
	var ctxs []*ofverbs.Context
	for i := range limSessions {
		c, err := ofverbs.Open(ofverbs.WithSocket(sock), ofverbs.WithClientName("hostile"))
		if err != nil {
			fmt.Printf("session %d: %v\n", i+1, err)
			return 1
		}
		ctxs = append(ctxs, c)
	}
	_, err := ofverbs.Open(ofverbs.WithSocket(sock), ofverbs.WithClientName("hostile"))
	check(wantQuota("session beyond the limit", err, "user-max-sessions"))
	for _, c := range ctxs[1:] {
		c.Close()
	}
	// The sessions closed are given back (once the daemon has reclaimed
	// them: Close does not wait for that): one more opens.
	var c2 *ofverbs.Context
	deadline := time.Now().Add(daemontest.Scaled(5 * time.Second))
	for i := 0; i < 1000; i++ {
		if c2, err = ofverbs.Open(ofverbs.WithSocket(sock), ofverbs.WithClientName("hostile")); err == nil || time.Now().After(deadline) {
			break
		}
		time.Sleep(5 * time.Millisecond)
	}
	if err != nil {
		check(fmt.Errorf("a session after closing three: %v", err))
	} else {
		defer c2.Close()
	}
	c := ctxs[0]
	defer c.Close()
	pd, err := c.AllocPD()
	if err != nil {
		fmt.Println("alloc-pd:", err)
		return 1
	}
	cq, err := c.CreateCQ(16, nil)
	if err != nil {
		fmt.Println("create-cq:", err)
		return 1
	}
	qp := func(typ ofverbs.QPType) (*ofverbs.QP, error) {
		return pd.CreateQP(ofverbs.QPInitAttr{Type: typ, SendCQ: cq, RecvCQ: cq,
			Cap: ofverbs.QPCap{MaxSendWR: 4, MaxRecvWR: 4, MaxSendSGE: 1, MaxRecvSGE: 1}})
	}
	// Ports: two UD QPs, the third refused.
	var uds []*ofverbs.QP
	for i := range limPorts {
		q, err := qp(ofverbs.QPTypeUD)
		if err != nil {
			check(fmt.Errorf("UD QP %d: %v", i+1, err))
			continue
		}
		uds = append(uds, q)
	}
	_, err = qp(ofverbs.QPTypeUD)
	check(wantQuota("UD QP beyond the port limit", err, "user-max-ports"))
	// QPs: one RC QP more reaches the QP limit, the next is refused.
	rc, err := qp(ofverbs.QPTypeRC)
	check(err)
	_, err = qp(ofverbs.QPTypeRC)
	check(wantQuota("RC QP beyond the QP limit", err, "user-max-qp"))
	// A destroyed QP is given back.
	if len(uds) > 0 {
		check(uds[0].Close())
		q, err := qp(ofverbs.QPTypeUD)
		check(err)
		if q != nil {
			q.Close()
		}
	}
	if rc != nil {
		rc.Close()
	}
	// Listeners.
	for i := range limListeners {
		l, err := c.Listen(fmt.Sprintf("127.0.0.1:%d", limListenBase+i))
		check(err)
		if l != nil {
			defer l.Close()
		}
	}
	_, err = c.Listen(fmt.Sprintf("127.0.0.1:%d", limListenBase+limListeners))
	check(wantQuota("listener beyond the limit", err, "user-max-listeners"))
	// Registered octets: a Buffer's 768 KiB, then process memory 256 KiB
	// (both count), then one octet more is refused.
	buf, err := c.AllocBuffer(768 << 10)
	if err != nil {
		fmt.Println("alloc-buffer:", err)
		return 1
	}
	_, err = pd.RegMR(buf.Bytes(), ofverbs.AccessLocalWrite)
	check(err)
	heap := make([]byte, 256<<10)
	_, err = pd.RegMR(heap, ofverbs.AccessLocalWrite)
	check(err)
	_, err = pd.RegMR(make([]byte, 1), ofverbs.AccessLocalWrite)
	check(wantQuota("registration beyond the limit", err, "user-max-registered-bytes"))
	for _, e := range errs {
		fmt.Println("FAIL:", e)
	}
	if len(errs) > 0 {
		return 1
	}
	fmt.Println("every user limit held")
	return 0
}

// runAsUser runs this test binary in helper mode as uid/gid hostileUID. The
// binary is copied where that user may run it.
func runAsUser(t *testing.T, mode, sock string) ([]byte, error) {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	for d := dir; d != "/" && d != os.TempDir(); d = filepath.Dir(d) {
		if err := os.Chmod(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	bin := filepath.Join(dir, "hostile-helper")
	if _, err := os.Stat(bin); err != nil {
		in, err := os.Open(exe)
		if err != nil {
			t.Fatal(err)
		}
		out, err := os.OpenFile(bin, os.O_CREATE|os.O_WRONLY, 0o755)
		if err != nil {
			t.Fatal(err)
		}
		_, err = io.Copy(out, in)
		in.Close()
		if cerr := out.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	cmd := exec.Command(bin)
	cmd.Dir = "/"
	cmd.Env = append(daemontest.CleanEnv(), helperEnv+"="+mode, sockEnv+"="+sock)
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: hostileUID, Gid: hostileUID},
		Pdeathsig: syscall.SIGKILL}
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err = pinfork.Run(cmd)
	return out.Bytes(), err
}

// TestHostileUserLimits: see above. Needs root (to run a client as
// another user).
func TestHostileUserLimits(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root: the hostile client runs as another user")
	}
	d := daemontest.Start(t, "user-limits", daemontest.Options{Ports: nextPorts(), Extra: limitFlags})
	for dir := filepath.Dir(d.Sock); dir != "/" && dir != os.TempDir(); dir = filepath.Dir(dir) {
		if err := os.Chmod(dir, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	g := newGoodClient(t, d)
	g.check(t, "before the attack")
	// Root holds its own full share of sessions while the hostile user
	// takes all of its share: the counts are per user.
	for i := range limSessions - 1 {
		d.Open(t, fmt.Sprintf("root-%d", i))
	}
	for run := 1; run <= 2; run++ {
		out, err := runAsUser(t, "user-limits", d.Sock)
		t.Logf("hostile client (uid %d), run %d:\n%s", hostileUID, run, out)
		if err != nil {
			t.Fatalf("hostile client run %d: %v", run, err)
		}
		g.check(t, fmt.Sprintf("after hostile run %d", run))
	}
	// Root's own limit holds too.
	_, err := ofverbs.Open(ofverbs.WithSocket(d.Sock))
	if err := wantQuota("root's session beyond its limit", err, "user-max-sessions"); err != nil {
		t.Fatal(err)
	}
	d.CheckAlive(t)
}
