package pinfork

import (
	"os/exec"
	"runtime"
	"sync"
)

type request struct {
	cmd  *exec.Cmd
	done chan error
}

var (
	once     sync.Once
	requests chan request
)

// forker is the goroutine of the pinned thread. It never returns, so its
// thread never exits.
func forker() {
	runtime.LockOSThread()
	for r := range requests {
		r.done <- r.cmd.Start()
	}
}

// Start is cmd.Start, forked from the pinned thread. Use it for every child
// that sets Pdeathsig.
func Start(cmd *exec.Cmd) error {
	once.Do(func() {
		requests = make(chan request)
		go forker()
	})
	done := make(chan error, 1)
	requests <- request{cmd, done}
	return <-done
}

// Run is cmd.Run with the fork done by Start.
func Run(cmd *exec.Cmd) error {
	if err := Start(cmd); err != nil {
		return err
	}
	return cmd.Wait()
}
