package rnic

import (
	"errors"
	"fmt"

	"golang.org/x/sys/unix"
)

// OpError is a failed control request: the errno for the reply header and a
// message for people (proto.ErrorBody).
type OpError struct {
	errno unix.Errno
	Msg   string
}

func (e *OpError) Error() string { return fmt.Sprintf("%s (%v)", e.Msg, e.errno) }

// Unwrap lets errors.Is(err, unix.EINVAL) work.
func (e *OpError) Unwrap() error { return e.errno }

func Errf(errno unix.Errno, format string, args ...any) error {
	return &OpError{errno: errno, Msg: fmt.Sprintf(format, args...)}
}

// ErrnoOf returns the errno an error reply carries: the OpError's, the first
// errno found in the chain, else EINVAL.
func ErrnoOf(err error) unix.Errno {
	var oe *OpError
	if errors.As(err, &oe) {
		return oe.errno
	}
	var en unix.Errno
	if errors.As(err, &en) && en != 0 {
		return en
	}
	return unix.EINVAL
}

// ErrEngineStopped is returned by engine.Do once the engine has stopped.
var ErrEngineStopped = Errf(unix.ENODEV, "iwarpd: the device is shutting down")
