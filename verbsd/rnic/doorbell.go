package rnic

import (
	"fmt"

	"golang.org/x/sys/unix"
)

// Doorbells: every session gets its own eventfd (hello reply, descriptor
// 0), which its client writes to wake a sleeping engine (proto.StatusPage's
// Asleep word says when).
//
// The client holds the same open file description as the daemon: file
// status flags (O_NONBLOCK) and the counter are shared. A client may clear
// O_NONBLOCK, read the counter, or fill it. So the engine never calls read()
// or write() on a doorbell — a read on a description the client made
// blocking, emptied by the client between epoll_wait and the read, would
// stop the engine. Instead the engine registers the
// doorbell with EPOLLET and only ever epoll_waits on it: eventfd(2)'s write
// wakes the wait queue on every successful write, whatever the counter
// holds, so each ring is one edge and nothing needs resetting. What a
// client can do to its own doorbell hurts only its own session:
//   - reading it may consume its own edge (epoll re-polls a ready item
//     before reporting it, so an emptied counter reports nothing): that
//     client's work then waits for the next wake-up of the engine;
//   - filling the counter (a write of 0xfffffffffffffffe) makes its later
//     rings fail with EAGAIN (or block, if it cleared O_NONBLOCK): the same.
// No other session shares the descriptor, so no client can steal another's
// wake-up, and the engine's own reads (the wake eventfd) are on a
// descriptor no client ever receives.

// NewDoorbell creates a session's doorbell and adds it, edge-triggered, to
// the engine's epoll set. Runs on the engine.
func (e *Engine) NewDoorbell() (int, error) {
	fd, err := unix.Eventfd(0, unix.EFD_CLOEXEC|unix.EFD_NONBLOCK)
	if err != nil {
		return -1, Errf(unix.EMFILE, "creating the session's doorbell: %v", err)
	}
	if e.Shared {
		return fd, nil // rnic/engines.go: watched by the engines of its QPs (bellWatch)
	}
	ev := unix.EpollEvent{Events: unix.EPOLLIN | unix.EPOLLET, Fd: int32(fd)}
	if err := unix.EpollCtl(e.EpFD, unix.EPOLL_CTL_ADD, fd, &ev); err != nil {
		unix.Close(fd)
		return -1, fmt.Errorf("verbsd: epoll_ctl (doorbell): %w", err)
	}
	return fd, nil
}

// closeDoorbell takes a session's doorbell out of the epoll set and closes
// the daemon's copy. Runs on the engine.
func (e *Engine) closeDoorbell(fd int) {
	if fd < 0 {
		return
	}
	unix.EpollCtl(e.EpFD, unix.EPOLL_CTL_DEL, fd, nil)
	delete(e.Bells, int32(fd))
	unix.Close(fd)
}
