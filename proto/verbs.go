package proto

import "fmt"

// QPType is a queue pair transport type.
type QPType uint8

const (
	QPTypeRC QPType = 1 // reliable connected: RDMAP/DDP/MPA over TCP
	QPTypeUD QPType = 2 // unreliable datagram: datagram profile over UDP
	QPTypeRD QPType = 3 // reliable datagram: datagram profile with the RD header
)

func (t QPType) String() string {
	switch t {
	case QPTypeRC:
		return "RC"
	case QPTypeUD:
		return "UD"
	case QPTypeRD:
		return "RD"
	}
	return fmt.Sprintf("qptype(%d)", uint8(t))
}

// QPState is a verbs queue pair state (RFC 5040 §10 maps RDMAP states onto
// these: Idle≈Init/RTR, RTS, Closing≈SQD, Terminate/Error≈Error).
type QPState uint8

const (
	QPStateReset QPState = iota
	QPStateInit
	QPStateRTR
	QPStateRTS
	QPStateSQD
	QPStateSQE
	QPStateError
)

var qpStateNames = [...]string{"RESET", "INIT", "RTR", "RTS", "SQD", "SQE", "ERROR"}

func (s QPState) String() string {
	if int(s) < len(qpStateNames) {
		return qpStateNames[s]
	}
	return fmt.Sprintf("qpstate(%d)", uint8(s))
}

// Access flags of a memory region (as ibv_access_flags).
type Access uint32

const (
	AccessLocalWrite   Access = 1 << 0
	AccessRemoteWrite  Access = 1 << 1
	AccessRemoteRead   Access = 1 << 2
	AccessRemoteAtomic Access = 1 << 3
	accessAll                 = AccessLocalWrite | AccessRemoteWrite | AccessRemoteRead | AccessRemoteAtomic
)

// Valid reports whether a has only defined bits, and remote write implies
// local write as verbs require.
func (a Access) Valid() bool {
	if a&^accessAll != 0 {
		return false
	}
	if a&(AccessRemoteWrite|AccessRemoteAtomic) != 0 && a&AccessLocalWrite == 0 {
		return false
	}
	return true
}

// EventType is the kind of an asynchronous event.
type EventType uint16

const (
	EventQPFatal       EventType = 1 // the QP went to the Error state
	EventQPAccessError EventType = 2 // a remote access violation on the QP
	EventCQError       EventType = 3 // CQ overrun
	EventSRQLimit      EventType = 4 // SRQ fell below its limit
	EventDeviceFatal   EventType = 5 // the daemon is shutting down
	// EventRemoteAccessRefused: a remote peer's access to memory through
	// this (datagram) QP was refused (invalid STag, bounds, rights); the QP
	// stays up. Rate-limited; the detail names the source and the count.
	EventRemoteAccessRefused EventType = 6
)

func (e EventType) String() string {
	switch e {
	case EventQPFatal:
		return "qp-fatal"
	case EventQPAccessError:
		return "qp-access-error"
	case EventCQError:
		return "cq-error"
	case EventSRQLimit:
		return "srq-limit-reached"
	case EventDeviceFatal:
		return "device-fatal"
	case EventRemoteAccessRefused:
		return "remote-access-refused"
	}
	return fmt.Sprintf("event(%d)", uint16(e))
}
