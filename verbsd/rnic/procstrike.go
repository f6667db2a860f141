package rnic

import (
	"sync"
	"time"

	"golang.org/x/sys/unix"
)

// Strikes bound how long one user can make engines wait on process memory
// (rnic/copier.go): every access that runs past the bound is a strike
// against the session's user; after StrikeLimit strikes within StrikeWindow
// the user's process-memory registrations are refused for StrikeBan
// (docs/memory-registration.md "A page that does not come"). A user's
// engine waiting is then at most StrikeLimit bounds per StrikeWindow plus
// StrikeBan, whatever number of sessions it opens: a stalled session fails
// every later access at once, and a new session cannot register process
// memory while the user is refused.
const (
	StrikeLimit  = 3
	StrikeWindow = time.Hour
	StrikeBan    = time.Hour
)

// StrikeTable is the strikes of each user.
type StrikeTable struct {
	mu    sync.Mutex
	users map[uint32][]time.Time // strike times within StrikeWindow, oldest first
}

// Strike counts a stall against uid at now and reports the user's strikes
// within the window.
func (t *StrikeTable) Strike(uid uint32, now time.Time) int {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.users == nil {
		t.users = map[uint32][]time.Time{}
	}
	s := append(t.recentLocked(uid, now), now)
	if len(s) > StrikeLimit {
		s = s[len(s)-StrikeLimit:]
	}
	t.users[uid] = s
	return len(s)
}

// recentLocked drops uid's strikes that no longer count: older than the
// window, unless they are what bans the user now.
func (t *StrikeTable) recentLocked(uid uint32, now time.Time) []time.Time {
	s := t.users[uid]
	if len(s) >= StrikeLimit && now.Sub(s[len(s)-1]) < StrikeBan {
		return s
	}
	for len(s) > 0 && now.Sub(s[0]) >= StrikeWindow {
		s = s[1:]
	}
	if len(s) == 0 {
		delete(t.users, uid)
		return nil
	}
	t.users[uid] = s
	return s
}

// Refused reports, with what the user can do, whether uid's process-memory
// registrations are refused at now.
func (t *StrikeTable) Refused(uid uint32, now time.Time) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	s := t.recentLocked(uid, now)
	if len(s) < StrikeLimit || now.Sub(s[len(s)-1]) >= StrikeBan {
		return nil
	}
	until := s[len(s)-1].Add(StrikeBan)
	return Errf(unix.EPERM, "reg-mr: user %d: process-memory registration refused until %s: %d accesses to this user's "+
		"process memory stalled past the bound within %v (pages that did not come: FUSE, NFS, userfaultfd); use "+
		"resident memory, or shared buffers (an ofverbs Buffer, libiwverbs iwv_alloc_buffer), which are not refused "+
		"(docs/memory-registration.md)", uid, until.UTC().Format(time.RFC3339), len(s), StrikeWindow)
}
