package pinfork

import (
	"os/exec"
	"runtime"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// TestChildOutlivesEndedThread: a goroutine locked to its thread exits
// (the runtime ends that thread) after a child was started; the child
// started through Start, with Pdeathsig, is still alive.
func TestChildOutlivesEndedThread(t *testing.T) {
	sleep, err := exec.LookPath("sleep")
	if err != nil {
		t.Skip("no sleep(1)")
	}
	var cmds []*exec.Cmd
	for i := 0; i < 8; i++ {
		done := make(chan *exec.Cmd)
		// Each child is started from a goroutine that then locks its
		// thread and ends it, the pattern that killed daemons in CI.
		go func() {
			runtime.LockOSThread()
			c := exec.Command(sleep, "30")
			c.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
			if err := Start(c); err != nil {
				t.Errorf("start: %v", err)
				done <- nil
				return
			}
			done <- c
		}()
		if c := <-done; c != nil {
			cmds = append(cmds, c)
		}
	}
	t.Cleanup(func() {
		for _, c := range cmds {
			c.Process.Kill()
			c.Wait()
		}
	})
	time.Sleep(200 * time.Millisecond) // bounded: lets the ended threads' signals land
	for i, c := range cmds {
		if err := unix.Kill(c.Process.Pid, 0); err != nil {
			t.Fatalf("child %d (pid %d) died when an unrelated thread ended: %v", i, c.Process.Pid, err)
		}
		var ws unix.WaitStatus
		if pid, _ := unix.Wait4(c.Process.Pid, &ws, unix.WNOHANG, nil); pid == c.Process.Pid {
			t.Fatalf("child %d exited: %v", i, ws)
		}
	}
}
