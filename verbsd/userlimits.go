package verbsd

import (
	"sync"

	"github.com/iwarpd/iwarpd/proto"
	"golang.org/x/sys/unix"
)

// UserLimits bound what all sessions of one Unix user (the SO_PEERCRED uid
// of their control connections) hold together, so that one user cannot
// exhaust the daemon for the others by opening many sessions (issue 13,
// point 5: 5 000 sessions in 3.2 s, each with the per-session Limits). A
// zero field means no limit. Every user is counted, root too. Exceeding a
// limit fails the request with EDQUOT and a message naming the limit and
// its configuration key (docs/iwarpd.md "Limits per user").
type UserLimits struct {
	Sessions   int    // sessions (past hello, iwarpctl's included)
	Registered uint64 // registered octets (memfd and process memory)
	QPs        int    // queue pairs of every type
	Ports      int    // UDP ports held by datagram (UD, RD) queue pairs
	Listeners  int    // RC connection listeners
}

// DefaultUserLimits: room for a node full of MPI ranks of one user (a
// session, a few QPs and one port per rank), far below what exhausts the
// daemon's descriptors or address space.
var DefaultUserLimits = UserLimits{
	Sessions:   1024,
	Registered: 64 << 30,
	QPs:        16384,
	Ports:      4096,
	Listeners:  1024,
}

// userRes is a resource counted per user.
type userRes int

const (
	resSessions userRes = iota
	resRegistered
	resQPs
	resPorts
	resListeners
	numUserRes
)

// userResInfo names each resource and its configuration key (cmd/iwarpd).
var userResInfo = [numUserRes]struct{ what, key string }{
	resSessions:   {"sessions", "user-max-sessions"},
	resRegistered: {"registered octets", "user-max-registered-bytes"},
	resQPs:        {"queue pairs", "user-max-qp"},
	resPorts:      {"datagram ports", "user-max-ports"},
	resListeners:  {"listeners", "user-max-listeners"},
}

func (l *UserLimits) limit(r userRes) uint64 {
	switch r {
	case resSessions:
		return uint64(max(l.Sessions, 0))
	case resRegistered:
		return l.Registered
	case resQPs:
		return uint64(max(l.QPs, 0))
	case resPorts:
		return uint64(max(l.Ports, 0))
	case resListeners:
		return uint64(max(l.Listeners, 0))
	}
	return 0
}

// userTable counts each user's resources; every session also keeps what
// it holds (session.held), so that whatever a session still holds when it
// ends is given back at once (releaseAll), whichever path ended it.
type userTable struct {
	mu    sync.Mutex
	users map[uint32]*[numUserRes]uint64
}

// acquire counts n of r for s's user, or fails with EDQUOT if that would
// exceed the user's limit.
func (t *userTable) acquire(s *session, r userRes, n uint64) error {
	lim := s.srv.cfg.UserLimits.limit(r)
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.users == nil {
		t.users = map[uint32]*[numUserRes]uint64{}
	}
	u := t.users[s.cred.Uid]
	if u == nil {
		u = new([numUserRes]uint64)
		t.users[s.cred.Uid] = u
	}
	if lim > 0 && (n > lim || u[r] > lim-n) {
		info := userResInfo[r]
		return errf(unix.EDQUOT, "user %d: the daemon's limit of %d %s per user is reached (%d held, %d more asked); "+
			"configuration key %s (docs/iwarpd.md)", s.cred.Uid, lim, info.what, u[r], n, info.key)
	}
	u[r] += n
	s.held[r] += n
	return nil
}

// release gives back n of r that s holds.
func (t *userTable) release(s *session, r userRes, n uint64) {
	t.mu.Lock()
	defer t.mu.Unlock()
	n = min(n, s.held[r])
	s.held[r] -= n
	if u := t.users[s.cred.Uid]; u != nil {
		u[r] -= min(n, u[r])
		t.dropIfIdleLocked(s.cred.Uid, u)
	}
}

// releaseAll gives back everything s holds (the session ended).
func (t *userTable) releaseAll(s *session) {
	t.mu.Lock()
	defer t.mu.Unlock()
	u := t.users[s.cred.Uid]
	for r := range numUserRes {
		if u != nil {
			u[r] -= min(s.held[r], u[r])
		}
		s.held[r] = 0
	}
	if u != nil {
		t.dropIfIdleLocked(s.cred.Uid, u)
	}
}

func (t *userTable) dropIfIdleLocked(uid uint32, u *[numUserRes]uint64) {
	if *u == ([numUserRes]uint64{}) {
		delete(t.users, uid)
	}
}

// validate reports a negative limit.
func (l *UserLimits) validate() error {
	for _, v := range []struct {
		r userRes
		n int
	}{{resSessions, l.Sessions}, {resQPs, l.QPs}, {resPorts, l.Ports}, {resListeners, l.Listeners}} {
		if v.n < 0 {
			return errf(unix.EINVAL, "%s %d is negative (0: no limit)", userResInfo[v.r].key, v.n)
		}
	}
	return nil
}

// qpHold is what one QP of a type holds of its user's limits: the QP, and
// a UDP port when it is a datagram QP.
type qpHold struct {
	s     *session
	ports uint64
}

func (s *session) qpHeld(t proto.QPType) qpHold {
	h := qpHold{s: s}
	if t != proto.QPTypeRC {
		h.ports = 1
	}
	return h
}

// holdQP counts a new QP of type t for s's user.
func (s *session) holdQP(t proto.QPType) (qpHold, error) {
	h := s.qpHeld(t)
	if err := s.srv.users.acquire(s, resQPs, 1); err != nil {
		return h, err
	}
	if h.ports > 0 {
		if err := s.srv.users.acquire(s, resPorts, h.ports); err != nil {
			s.srv.users.release(s, resQPs, 1)
			return h, err
		}
	}
	return h, nil
}

// release gives back what h holds (safe to call from the engine).
func (h qpHold) release() {
	h.s.srv.users.release(h.s, resQPs, 1)
	if h.ports > 0 {
		h.s.srv.users.release(h.s, resPorts, h.ports)
	}
}
