package verbsd

import (
	"errors"
	"fmt"

	"golang.org/x/sys/unix"
)

// opError is a failed control request: the errno for the reply header and a
// message for people (proto.ErrorBody).
type opError struct {
	errno unix.Errno
	msg   string
}

func (e *opError) Error() string { return fmt.Sprintf("%s (%v)", e.msg, e.errno) }

// Unwrap lets errors.Is(err, unix.EINVAL) work.
func (e *opError) Unwrap() error { return e.errno }

func errf(errno unix.Errno, format string, args ...any) error {
	return &opError{errno: errno, msg: fmt.Sprintf(format, args...)}
}

// errnoOf returns the errno an error reply carries: the opError's, the first
// errno found in the chain, else EINVAL.
func errnoOf(err error) unix.Errno {
	var oe *opError
	if errors.As(err, &oe) {
		return oe.errno
	}
	var en unix.Errno
	if errors.As(err, &en) && en != 0 {
		return en
	}
	return unix.EINVAL
}

// errEngineStopped is returned by engine.Do once the engine has stopped.
var errEngineStopped = errf(unix.ENODEV, "iwarpd: the device is shutting down")
