package hostile

import (
	"errors"
	"fmt"
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

// Issue 13, point 6: without XDG_RUNTIME_DIR the control socket lives in
// $TMPDIR/iwarpd-UID, a name another user can take first. Neither the
// daemon nor ofverbs may accept such a directory, and ofverbs must not hand
// memory to a daemon that runs as someone else (SO_PEERCRED).

// The impostor's uid (the victim is otherUID).
const impostorUID = 1002

func init() { helpers["victim-open"] = helperVictimOpen }

// helperVictimOpen opens the device (the socket of envArg, or the default
// one when empty) and registers a secret; it says the errno of Open, or
// "opened".
func helperVictimOpen() int {
	var opts []ofverbs.Option
	if p := os.Getenv(envArg); p != "" {
		opts = append(opts, ofverbs.WithSocket(p))
	}
	c, err := ofverbs.Open(append(opts, ofverbs.WithHelloTimeout(daemontest.Scaled(5*time.Second)))...)
	if err != nil {
		var errno unix.Errno
		errors.As(err, &errno)
		helperReady(fmt.Sprint(int(errno)))
		fmt.Fprintln(os.Stderr, err)
		return 0
	}
	if pd, err := c.AllocPD(); err == nil {
		if buf, err := c.AllocBuffer(4096); err == nil {
			copy(buf.Bytes(), "the victim's secret")
			pd.RegMR(buf.Bytes(), ofverbs.AccessLocalWrite|ofverbs.AccessRemoteRead)
		}
	}
	helperReady("opened")
	return 0
}

// runAs starts bin as uid with env (and nothing else inherited but PATH).
func runAs(t *testing.T, uid int, env []string, bin string, args ...string) (*exec.Cmd, *daemontest.Buffer) {
	t.Helper()
	cmd := exec.Command(bin, args...)
	cmd.Env = append([]string{"PATH=" + os.Getenv("PATH")}, env...)
	out := &daemontest.Buffer{}
	cmd.Stdout, cmd.Stderr = out, out
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL, Credential: &syscall.Credential{Uid: uint32(uid), Gid: uint32(uid)}}
	return cmd, out
}

// accessibleCopy copies a program where other users may run it.
func accessibleCopy(t *testing.T, src string) string {
	t.Helper()
	dir := t.TempDir()
	openDirs(t, dir)
	b, err := os.ReadFile(src)
	if err != nil {
		t.Fatal(err)
	}
	dst := filepath.Join(dir, filepath.Base(src))
	if err := os.WriteFile(dst, b, 0o755); err != nil {
		t.Fatal(err)
	}
	return dst
}

// startImpostor runs iwarpd as impostorUID on sock, reachable by anyone,
// and waits (bounded) for the socket.
func startImpostor(t *testing.T, bin, sock string) {
	t.Helper()
	cmd, out := runAs(t, impostorUID, nil, bin, "-socket", sock, "-socket-mode", "0666", "-ud-ports", nextPorts(), "-rd-ports", "0-0")
	if err := pinfork.Start(cmd); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cmd.Process.Kill()
		cmd.Wait()
		if t.Failed() {
			t.Logf("impostor log:\n%s", out)
		}
	})
	daemontest.Eventually(t, "the impostor's socket", 10*time.Second, func() bool {
		_, err := os.Stat(sock)
		return err == nil
	})
}

func TestSocketDirSquatting(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root to play three users")
	}
	d := daemontest.Start(t, "legit", daemontest.Options{Ports: nextPorts()})
	by := startBystander(t, d)
	iwarpd := accessibleCopy(t, daemontest.Bins["iwarpd"])

	// A squatted default directory: $TMPDIR/iwarpd-1001 made by uid 1002,
	// an impostor daemon inside (its socket open to all).
	tmp := t.TempDir()
	openDirs(t, tmp)
	squat := filepath.Join(tmp, fmt.Sprintf("iwarpd-%d", otherUID))
	if err := os.Mkdir(squat, 0o755); err != nil {
		t.Fatal(err)
	}
	os.Chown(squat, impostorUID, impostorUID)
	startImpostor(t, iwarpd, filepath.Join(squat, "iwarpd.sock"))

	t.Run("client/default-dir", func(t *testing.T) {
		p := spawnHostileAsEnv(t, otherUID, "victim-open", "", "", "TMPDIR="+tmp)
		if p.info != fmt.Sprint(int(unix.EACCES)) {
			t.Errorf("the victim's Open in a squatted %s: %q, want EACCES (%d): %s", squat, p.info, int(unix.EACCES), p.stderr)
		}
	})
	t.Run("daemon/default-dir", func(t *testing.T) {
		// Squatted and world-writable, so that the victim's daemon could
		// make its socket there (and the squatter replace it later).
		tmp := t.TempDir()
		openDirs(t, tmp)
		squat := filepath.Join(tmp, fmt.Sprintf("iwarpd-%d", otherUID))
		if err := os.Mkdir(squat, 0o777); err != nil {
			t.Fatal(err)
		}
		os.Chmod(squat, 0o777)
		os.Chown(squat, impostorUID, impostorUID)
		cmd, out := runAs(t, otherUID, []string{"TMPDIR=" + tmp}, iwarpd, "-ud-ports", nextPorts(), "-rd-ports", "0-0")
		pinfork.Start(cmd)
		done := make(chan error, 1)
		go func() { done <- cmd.Wait() }()
		select {
		case err := <-done:
			if err == nil || !strings.Contains(out.String(), squat) {
				t.Errorf("iwarpd in a squatted %s: exit %v: %s", squat, err, out)
			}
		case <-time.After(daemontest.Scaled(10 * time.Second)):
			cmd.Process.Kill()
			<-done
			t.Errorf("iwarpd started in a squatted %s: %s", squat, out)
		}
	})
	t.Run("client/peercred", func(t *testing.T) {
		// A sticky world-writable directory (like /tmp) passes the
		// directory check; the impostor's uid does not.
		pub := filepath.Join(t.TempDir(), "pub")
		os.Mkdir(pub, 0o777)
		os.Chmod(pub, os.ModeSticky|0o777)
		openDirs(t, filepath.Dir(pub))
		sock := filepath.Join(pub, "iwarpd.sock")
		startImpostor(t, iwarpd, sock)
		p := spawnHostileAsEnv(t, otherUID, "victim-open", "", sock)
		if p.info != fmt.Sprint(int(unix.EACCES)) {
			t.Errorf("the victim's Open of an impostor (uid %d) at %s: %q, want EACCES (%d): %s", impostorUID, sock, p.info, int(unix.EACCES), p.stderr)
		}
	})
	by.progressed(t, "squatting")
}
