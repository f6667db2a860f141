package ofverbs

import (
	"errors"
	"fmt"

	"golang.org/x/sys/unix"
)

// Error is a failed verb. It keeps the errno the daemon (or ofverbs itself)
// chose, so that callers can test it with errors.Is(err, unix.ENOMEM), and the
// daemon's explanation for people.
type Error struct {
	Op    string     // the verb: "create-qp", "reg-mr", "post-send"...
	Errno unix.Errno // why, as an errno
	Msg   string     // human detail (the daemon's text for daemon errors)
}

func (e *Error) Error() string {
	s := "ofverbs: " + e.Op + ": " + e.Errno.Error()
	if e.Msg != "" {
		s += ": " + e.Msg
	}
	return s
}

// Unwrap returns the errno, so errors.Is(err, unix.EINVAL) works.
func (e *Error) Unwrap() error { return e.Errno }

func newError(op string, errno unix.Errno, format string, args ...any) *Error {
	return &Error{Op: op, Errno: errno, Msg: fmt.Sprintf(format, args...)}
}

// errnoOf extracts the errno of a system call error, or def.
func errnoOf(err error, def unix.Errno) unix.Errno {
	var en unix.Errno
	if errors.As(err, &en) {
		return en
	}
	return def
}

// Messages of session errors (errno ENODEV).
const (
	msgDaemonGone = "iwarpd: daemon closed the session"
	msgClosed     = "context closed"
)

// WCError is the error of a work completion whose status is not success
// (see WC.Err).
type WCError struct {
	ID      uint64
	Status  WCStatus
	Opcode  WCOpcode
	QPN     uint32
	Term    uint32 // iWARP error layer<<16 | type<<8 | code, when TermValid
	TermSet bool
}

func (e *WCError) Error() string {
	s := fmt.Sprintf("ofverbs: work request %d (%v on QP %d): %v", e.ID, e.Opcode, e.QPN, e.Status)
	if e.TermSet {
		s += fmt.Sprintf(" (iWARP error %#06x)", e.Term)
	}
	return s
}
