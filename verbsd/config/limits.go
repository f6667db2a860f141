package config

import "fmt"

// UserLimits bound what all sessions of one Unix user (the SO_PEERCRED uid
// of their control connections) hold together, so that one user cannot
// exhaust the daemon for the others by opening many sessions (5 000
// sessions in 3.2 s, each with the per-session Limits). A
// zero field means no limit. Every user is counted, root too. Exceeding a
// limit fails the request with EDQUOT and a message naming the limit and
// its configuration key (docs/iwarpd.md "Limits per user").
type UserLimits struct {
	Sessions   int    // sessions (past hello, iwarpctl's included)
	Registered uint64 // registered octets (memfd and process memory)
	QPs        int    // queue pairs of every type
	Ports      int    // UDP ports held by datagram (UD, RD) queue pairs
	Listeners  int    // RC connection listeners
	// Held: octets of RC messages the daemon holds for QPs created with
	// hold_recv until their receive is posted (rc/hold.go).
	Held uint64
}

// DefaultUserLimits: room for a node full of MPI ranks of one user (a
// session, a few QPs and one port per rank), far below what exhausts the
// daemon's descriptors or address space. These are the ceilings:
// DefaultConfig fits the memory-bound ones to the machine's RAM
// (config/machine.go).
var DefaultUserLimits = UserLimits{
	Sessions:   1024,
	Registered: 64 << 30,
	QPs:        16384,
	Ports:      4096,
	Listeners:  1024,
	Held:       1 << 30,
}

// UserRes is a resource counted per user.
type UserRes int

const (
	ResSessions UserRes = iota
	ResRegistered
	ResQPs
	ResPorts
	ResListeners
	ResHeld
	NumUserRes
)

// UserResInfo names each resource and its configuration key (cmd/iwarpd).
var UserResInfo = [NumUserRes]struct{ What, Key string }{
	ResSessions:   {"sessions", "user-max-sessions"},
	ResRegistered: {"registered octets", "user-max-registered-bytes"},
	ResQPs:        {"queue pairs", "user-max-qp"},
	ResPorts:      {"datagram ports", "user-max-ports"},
	ResListeners:  {"listeners", "user-max-listeners"},
	ResHeld:       {"octets of RC messages held for want of a receive", "user-max-held-bytes"},
}

func (l *UserLimits) Limit(r UserRes) uint64 {
	switch r {
	case ResSessions:
		return uint64(max(l.Sessions, 0))
	case ResRegistered:
		return l.Registered
	case ResQPs:
		return uint64(max(l.QPs, 0))
	case ResPorts:
		return uint64(max(l.Ports, 0))
	case ResListeners:
		return uint64(max(l.Listeners, 0))
	case ResHeld:
		return l.Held
	}
	return 0
}

// validate reports a negative limit.
func (l *UserLimits) validate() error {
	for _, v := range []struct {
		r UserRes
		n int
	}{{ResSessions, l.Sessions}, {ResQPs, l.QPs}, {ResPorts, l.Ports}, {ResListeners, l.Listeners}} {
		if v.n < 0 {
			return fmt.Errorf("%s %d is negative (0: no limit)", UserResInfo[v.r].Key, v.n)
		}
	}
	return nil
}
