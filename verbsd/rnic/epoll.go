package rnic

import (
	"sync/atomic"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// noPwait2 is set once epoll_pwait2 failed with ENOSYS (Linux before 5.11).
var noPwait2 atomic.Bool

// epollWaitFor is epoll_wait(2) with a timeout kept to the nanosecond:
// epoll_pwait2(2) (Linux 5.11), whose timeout is a timespec; where the
// kernel lacks it, epoll_wait with the timeout rounded up to whole
// milliseconds.
func epollWaitFor(epfd int, events []unix.EpollEvent, timeout time.Duration) (int, error) {
	if len(events) == 0 {
		return 0, nil
	}
	if !noPwait2.Load() {
		ts := unix.NsecToTimespec(int64(timeout))
		n, _, errno := unix.Syscall6(unix.SYS_EPOLL_PWAIT2, uintptr(epfd), uintptr(unsafe.Pointer(&events[0])),
			uintptr(len(events)), uintptr(unsafe.Pointer(&ts)), 0, 0)
		if errno != unix.ENOSYS {
			if errno != 0 {
				return 0, errno
			}
			return int(n), nil
		}
		noPwait2.Store(true)
	}
	ms := int((timeout + time.Millisecond - 1) / time.Millisecond)
	return unix.EpollWait(epfd, events, ms)
}
