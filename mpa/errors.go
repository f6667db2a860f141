package mpa

import (
	"errors"
	"fmt"

	"github.com/iwarpd/iwarpd/iwerr"
)

// Sentinel errors. They are returned wrapped with context; test them with
// errors.Is.
var (
	// ErrTruncated means the input is shorter than the frame or FPDU it
	// announces: the caller should buffer more bytes and try again.
	ErrTruncated = errors.New("mpa: truncated")

	// ErrBadKey means the 16 octets at the start of a frame are neither
	// KeyRequest nor KeyReply.
	ErrBadKey = errors.New("mpa: bad request/reply key")

	// ErrPrivateDataTooLong means PD_Length exceeds MaxPrivateData
	// (RFC 5044 §7.1).
	ErrPrivateDataTooLong = errors.New("mpa: private data longer than 512 octets")

	// ErrRejected means the responder set the R bit in its Reply
	// (RFC 5044 §7.1.5). The error is a *RejectedError carrying the peer's
	// private data.
	ErrRejected = errors.New("mpa: connection rejected by responder")

	// ErrState means a method was called out of order (a programming error
	// of the caller, not a protocol error of the peer).
	ErrState = errors.New("mpa: call out of order")
)

// NegotiationError is a failed MPA Request/Reply exchange. Term is the
// TERMINATE error the RFC names for the failure (Layer LLP, EType MPA);
// errors.Is(err, iwerr.MPAInsufficientIRD) and friends match it.
//
// Reject tells the caller what to send: true means "send the Reject Reply
// returned beside this error, then close the TCP connection" (responder
// side, before any FPDU may flow); false means "send a TERMINATE carrying
// Term, then close" (initiator side, RFC 6581 §9).
type NegotiationError struct {
	Term   iwerr.Error
	Reject bool
	Reason string
}

func (e *NegotiationError) Error() string {
	return fmt.Sprintf("mpa: negotiation: %s (%s)", e.Reason, e.Term)
}

// Unwrap returns Term, so that errors.Is matches the TERMINATE triple.
func (e *NegotiationError) Unwrap() error { return e.Term }

// RejectedError is returned by Initiator.HandleReply when the Reply has the
// R bit set. It matches ErrRejected with errors.Is.
type RejectedError struct {
	// PrivateData is the ULP private data of the Reject Reply (with the
	// RFC 6581 IRD/ORD block removed when the Reply carried one).
	PrivateData []byte
}

func (e *RejectedError) Error() string {
	return fmt.Sprintf("%s (%d octets of private data)", ErrRejected, len(e.PrivateData))
}

// Is reports whether target is ErrRejected.
func (e *RejectedError) Is(target error) bool { return target == ErrRejected }

func negotiationErr(term iwerr.Error, reject bool, format string, args ...any) *NegotiationError {
	return &NegotiationError{Term: term, Reject: reject, Reason: fmt.Sprintf(format, args...)}
}
