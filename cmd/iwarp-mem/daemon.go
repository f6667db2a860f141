package main

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync"
	"syscall"
	"time"

	"github.com/iwarpd/iwarpd/internal/pinfork"
	"github.com/iwarpd/iwarpd/ofverbs"
)

// daemon is an iwarpd process this program started.
type daemon struct {
	name   string
	sock   string
	cmd    *exec.Cmd
	out    *syncBuffer
	exited chan struct{}
}

type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// startDaemon runs bin with the flags on a socket in dir and waits (at most
// 10 s) until it answers Hello.
func startDaemon(bin, dir, name string, flags ...string) (*daemon, error) {
	d := &daemon{name: name, sock: filepath.Join(dir, name+".sock"), out: &syncBuffer{}, exited: make(chan struct{})}
	args := append([]string{"-socket", d.sock, "-log-level", "warn"}, flags...)
	d.cmd = exec.Command(bin, args...)
	d.cmd.Stdout, d.cmd.Stderr = d.out, d.out
	d.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := pinfork.Start(d.cmd); err != nil {
		return nil, fmt.Errorf("start %s: %w", name, err)
	}
	go func() {
		d.cmd.Wait()
		close(d.exited)
	}()
	deadline := time.Now().Add(10 * time.Second)
	for {
		select {
		case <-d.exited:
			return nil, fmt.Errorf("%s exited: %s", name, d.out)
		default:
		}
		c, err := ofverbs.Open(ofverbs.WithSocket(d.sock), ofverbs.WithHelloTimeout(time.Second), ofverbs.WithClientName("iwarp-mem-probe"))
		if err == nil {
			c.Close()
			return d, nil
		}
		if time.Now().After(deadline) {
			d.stop()
			return nil, fmt.Errorf("%s did not answer within 10 s: %v\n%s", name, err, d.out)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func (d *daemon) pid() string { return strconv.Itoa(d.cmd.Process.Pid) }

// mem reads the daemon's memory.
func (d *daemon) mem() (procMem, error) {
	select {
	case <-d.exited:
		return procMem{}, fmt.Errorf("%s is not running: %s", d.name, d.out)
	default:
	}
	return readProcMem(d.pid())
}

// stop ends the daemon: SIGTERM, then SIGKILL after 5 s.
func (d *daemon) stop() {
	d.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-d.exited:
	case <-time.After(5 * time.Second):
		d.cmd.Process.Kill()
		<-d.exited
	}
}

// tempDir makes the directory of the daemons' sockets.
func tempDir() (string, error) { return os.MkdirTemp("", "iwarp-mem-") }
