package eventfd

import (
	"encoding/binary"
	"errors"
	"fmt"

	"golang.org/x/sys/unix"
)

// EventFD is a non-blocking or blocking eventfd descriptor.
type EventFD struct{ fd int }

// New creates an eventfd (close-on-exec; non-blocking if nonblock).
func New(nonblock bool) (*EventFD, error) {
	flags := unix.EFD_CLOEXEC
	if nonblock {
		flags |= unix.EFD_NONBLOCK
	}
	fd, err := unix.Eventfd(0, flags)
	if err != nil {
		return nil, fmt.Errorf("eventfd: %w", err)
	}
	return &EventFD{fd: fd}, nil
}

// FromFD adopts a received descriptor after checking it is an eventfd-like
// counter (an 8-byte write must be accepted later; here we only check the
// descriptor is open).
func FromFD(fd int) (*EventFD, error) {
	if _, err := unix.FcntlInt(uintptr(fd), unix.F_GETFD, 0); err != nil {
		return nil, fmt.Errorf("eventfd: descriptor %d: %w", fd, err)
	}
	return &EventFD{fd: fd}, nil
}

// FD returns the descriptor.
func (e *EventFD) FD() int { return e.fd }

var one = binary.NativeEndian.AppendUint64(nil, 1)

// Signal adds 1 to the counter. A full counter (EAGAIN) already wakes the
// reader, so it is not an error.
func (e *EventFD) Signal() error {
	_, err := unix.Write(e.fd, one)
	if err != nil && !errors.Is(err, unix.EAGAIN) {
		return fmt.Errorf("eventfd: signal: %w", err)
	}
	return nil
}

// Drain reads and returns the counter (0 if a non-blocking eventfd is
// unsignalled). On a blocking eventfd it waits for a signal.
func (e *EventFD) Drain() (uint64, error) {
	var b [8]byte
	for {
		_, err := unix.Read(e.fd, b[:])
		if errors.Is(err, unix.EINTR) {
			continue
		}
		if errors.Is(err, unix.EAGAIN) {
			return 0, nil
		}
		if err != nil {
			return 0, fmt.Errorf("eventfd: drain: %w", err)
		}
		return binary.NativeEndian.Uint64(b[:]), nil
	}
}

// Close closes the descriptor.
func (e *EventFD) Close() error {
	if e == nil || e.fd < 0 {
		return nil
	}
	err := unix.Close(e.fd)
	e.fd = -1
	return err
}
