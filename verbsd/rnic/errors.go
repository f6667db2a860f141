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
	// Limit is the flag of the configured limit that refused the request
	// ("" when no limit did): the daemon logs such refusals at warn
	// (verbsd/session_serve.go), so that an operator sees which limit a
	// client ran into without the client's help (issue 19, item 8).
	Limit string
}

func (e *OpError) Error() string { return fmt.Sprintf("%s (%v)", e.Msg, e.errno) }

// Unwrap lets errors.Is(err, unix.EINVAL) work.
func (e *OpError) Unwrap() error { return e.errno }

func Errf(errno unix.Errno, format string, args ...any) error {
	return &OpError{errno: errno, Msg: fmt.Sprintf(format, args...)}
}

// LimitErrf is Errf for a request refused by the configured limit whose
// flag is flag (without its dash); the message must say the limit, what is
// in use and that the flag raises it.
func LimitErrf(errno unix.Errno, flag, format string, args ...any) error {
	return &OpError{errno: errno, Msg: fmt.Sprintf(format, args...), Limit: flag}
}

// LimitOf returns the flag of the limit that refused err ("" when none).
func LimitOf(err error) string {
	var oe *OpError
	if errors.As(err, &oe) {
		return oe.Limit
	}
	return ""
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
