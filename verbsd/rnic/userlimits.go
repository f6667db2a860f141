package rnic

import (
	"sync"

	"github.com/iwarpd/iwarpd/verbsd/config"
	"golang.org/x/sys/unix"
)

// UserTable counts each user's resources; every session also keeps what
// it holds (session.held), so that whatever a session still holds when it
// ends is given back at once (ReleaseAll), whichever path ended it.
type UserTable struct {
	mu    sync.Mutex
	users map[uint32]*[config.NumUserRes]uint64
}

// Acquire counts n of r for s's user, or fails with EDQUOT if that would
// exceed the user's limit.
func (t *UserTable) Acquire(s *Session, r config.UserRes, n uint64) error {
	lim := s.Dev.Cfg.UserLimits.Limit(r)
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.users == nil {
		t.users = map[uint32]*[config.NumUserRes]uint64{}
	}
	u := t.users[s.Cred.Uid]
	if u == nil {
		u = new([config.NumUserRes]uint64)
		t.users[s.Cred.Uid] = u
	}
	if lim > 0 && (n > lim || u[r] > lim-n) {
		info := config.UserResInfo[r]
		return LimitErrf(unix.EDQUOT, info.Key, "user %d: the daemon's limit of %d %s per user is reached (%d held, %d more asked); "+
			"raise it with -%s (configuration key %s, docs/iwarpd.md)", s.Cred.Uid, lim, info.What, u[r], n, info.Key, info.Key)
	}
	u[r] += n
	s.held[r] += n
	return nil
}

// Release gives back n of r that s holds.
func (t *UserTable) Release(s *Session, r config.UserRes, n uint64) {
	t.mu.Lock()
	defer t.mu.Unlock()
	n = min(n, s.held[r])
	s.held[r] -= n
	if u := t.users[s.Cred.Uid]; u != nil {
		u[r] -= min(n, u[r])
		t.dropIfIdleLocked(s.Cred.Uid, u)
	}
}

// ReleaseAll gives back everything s holds (the session ended).
func (t *UserTable) ReleaseAll(s *Session) {
	t.mu.Lock()
	defer t.mu.Unlock()
	u := t.users[s.Cred.Uid]
	for r := range config.NumUserRes {
		if u != nil {
			u[r] -= min(s.held[r], u[r])
		}
		s.held[r] = 0
	}
	if u != nil {
		t.dropIfIdleLocked(s.Cred.Uid, u)
	}
}

// Held is what uid holds now, every resource (zero once its last session
// has ended and released everything).
func (t *UserTable) Held(uid uint32) [config.NumUserRes]uint64 {
	t.mu.Lock()
	defer t.mu.Unlock()
	if u := t.users[uid]; u != nil {
		return *u
	}
	return [config.NumUserRes]uint64{}
}

func (t *UserTable) dropIfIdleLocked(uid uint32, u *[config.NumUserRes]uint64) {
	if *u == ([config.NumUserRes]uint64{}) {
		delete(t.users, uid)
	}
}

// QPHold is what one QP holds of its user's limits: the QP, and the ports
// it binds (a datagram QP's UDP port).
type QPHold struct {
	s     *Session
	ports uint64
}

// QPHeld is what a QP of s binding ports ports holds (to release it).
func (s *Session) QPHeld(ports uint64) QPHold { return QPHold{s: s, ports: ports} }

// HoldQP counts a new QP binding ports ports for s's user.
func (s *Session) HoldQP(ports uint64) (QPHold, error) {
	h := s.QPHeld(ports)
	if err := s.Dev.Users.Acquire(s, config.ResQPs, 1); err != nil {
		return h, err
	}
	if h.ports > 0 {
		if err := s.Dev.Users.Acquire(s, config.ResPorts, h.ports); err != nil {
			s.Dev.Users.Release(s, config.ResQPs, 1)
			return h, err
		}
	}
	return h, nil
}

// Release gives back what h holds (safe to call from the engine).
func (h QPHold) Release() {
	h.s.Dev.Users.Release(h.s, config.ResQPs, 1)
	if h.ports > 0 {
		h.s.Dev.Users.Release(h.s, config.ResPorts, h.ports)
	}
}
