package main

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"time"

	"golang.org/x/sys/unix"
)

// waiter is the wait discipline that works on a machine with few cores
// (docs/iwarp-perf.md, research/perf-baselines.md): try; between empty tries
// yield the CPU with sched_yield for at most pollWindow; then block (poll(2)
// on a descriptor) in slices, for at most timeout in all.
type waiter struct {
	pollWindow time.Duration
	timeout    time.Duration
}

// errTimeout means nothing arrived within the waiter's timeout.
var errTimeout = errors.New("timed out")

// wait calls try until it reports done or fails. block is called, after the
// poll window, with the longest time it may sleep.
func (w waiter) wait(try func() (bool, error), block func(time.Duration) error) error {
	var start time.Time
	for {
		done, err := try()
		if err != nil || done {
			return err
		}
		now := time.Now()
		if start.IsZero() {
			start = now
		}
		waited := now.Sub(start)
		if waited < w.pollWindow {
			schedYield()
			continue
		}
		if waited >= w.timeout {
			return fmt.Errorf("%w after %v", errTimeout, w.timeout.Round(time.Millisecond))
		}
		if err := block(min(w.timeout-waited, 100*time.Millisecond)); err != nil {
			return err
		}
	}
}

// pollFD blocks in poll(2) until fd has one of events or d passes. An
// interrupted poll (Go's preemption signals) simply returns.
func pollFD(fd int, events int16, d time.Duration) error {
	fds := []unix.PollFd{{Fd: int32(fd), Events: events}}
	ms := int(d / time.Millisecond)
	if ms < 1 {
		ms = 1
	}
	_, err := unix.Poll(fds, ms)
	if err != nil && !errors.Is(err, unix.EINTR) {
		return fmt.Errorf("poll: %w", err)
	}
	return nil
}

// pinProcess binds every thread of the process to cpu: threads created later
// inherit the mask from their creator.
func pinProcess(cpu int) error {
	var set unix.CPUSet
	set.Set(cpu)
	if err := unix.SchedSetaffinity(0, &set); err != nil {
		return fmt.Errorf("pinning to cpu %d: %w", cpu, err)
	}
	tasks, err := os.ReadDir(filepath.Join("/proc", strconv.Itoa(os.Getpid()), "task"))
	if err != nil {
		return fmt.Errorf("pinning to cpu %d: %w", cpu, err)
	}
	for _, task := range tasks {
		tid, err := strconv.Atoi(task.Name())
		if err != nil {
			continue
		}
		if err := unix.SchedSetaffinity(tid, &set); err != nil && !errors.Is(err, unix.ESRCH) {
			return fmt.Errorf("pinning thread %d to cpu %d: %w", tid, cpu, err)
		}
	}
	return nil
}

// schedYield gives the CPU to another runnable thread (sched_yield(2)).
func schedYield() { unix.RawSyscall(unix.SYS_SCHED_YIELD, 0, 0, 0) }
