package hostile

import (
	"errors"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/iwarpd/iwarpd/ofverbs"
	"github.com/iwarpd/iwarpd/test/daemontest"
	"github.com/iwarpd/iwarpd/verbsd/verbsdtest"
	"golang.org/x/sys/unix"
)

// Issue 13, point 7: a client must not exhaust the daemon's descriptors
// with listeners, and when descriptors run out anyway the accept loop must
// neither spin nor flood the log, and must answer new clients at once.

func init() {
	helpers["listeners"] = helperListeners
	helpers["sessions"] = helperSessions
}

// helperListeners opens RC listeners on ephemeral ports until refused and
// says how many it got and why it stopped.
func helperListeners() int {
	c, err := ofverbs.Open(ofverbs.WithSocket(os.Getenv(envSock)), ofverbs.WithClientName("listeners"))
	if err != nil {
		return helperFail("open: %v", err)
	}
	n := 0
	var why error
	for ; n < 2000; n++ {
		if _, err := c.Listen(":0"); err != nil {
			why = err
			break
		}
	}
	errno := unix.Errno(0)
	errors.As(why, &errno)
	helperReady(fmt.Sprint(n), fmt.Sprint(int(errno)))
	time.Sleep(helperLifetime())
	return 0
}

// helperSessions opens sessions until the daemon refuses one (it ran out
// of descriptors) and holds them.
func helperSessions() int {
	var held []*verbsdtest.Client
	for i := 0; i < 5000; i++ {
		c, err := verbsdtest.Dial(os.Getenv(envSock), false)
		if err != nil {
			break
		}
		held = append(held, c)
	}
	helperReady(fmt.Sprint(len(held)))
	time.Sleep(helperLifetime())
	return 0
}

// TestListenerLimit: listeners per session are bounded (-max-listeners).
func TestListenerLimit(t *testing.T) {
	d := daemontest.Start(t, "listeners", daemontest.Options{Ports: nextPorts(), Extra: []string{"-max-listeners", "16"}})
	by := startBystander(t, d)
	p := spawnHostile(t, "listeners", d.Sock, "")
	var n, errno int
	fmt.Sscan(p.info, &n, &errno)
	if n != 16 || unix.Errno(errno) != unix.EMFILE {
		t.Errorf("a session opened %d listeners and stopped with %v; want 16 then EMFILE", n, unix.Errno(errno))
	}
	by.progressed(t, "listener flood")
}

// openFDs counts pid's open descriptors.
func openFDs(t *testing.T, pid int) int {
	t.Helper()
	ents, err := os.ReadDir(fmt.Sprintf("/proc/%d/fd", pid))
	if err != nil {
		t.Fatal(err)
	}
	return len(ents)
}

// setNofile sets pid's soft descriptor limit, keeping its hard limit (so
// that the soft one can be raised again).
func setNofile(pid int, cur uint64) error {
	var old unix.Rlimit
	if err := unix.Prlimit(pid, unix.RLIMIT_NOFILE, nil, &old); err != nil {
		return err
	}
	return unix.Prlimit(pid, unix.RLIMIT_NOFILE, &unix.Rlimit{Cur: cur, Max: old.Max}, nil)
}

// lowestFreeFD is the lowest descriptor number pid does not use.
func lowestFreeFD(t *testing.T, pid int) int {
	t.Helper()
	ents, err := os.ReadDir(fmt.Sprintf("/proc/%d/fd", pid))
	if err != nil {
		t.Fatal(err)
	}
	used := map[int]bool{}
	for _, e := range ents {
		var n int
		if _, err := fmt.Sscan(e.Name(), &n); err == nil {
			used[n] = true
		}
	}
	n := 0
	for used[n] {
		n++
	}
	return n
}

// TestAcceptOutOfFDs: the daemon's descriptor limit is lowered so that a
// hostile client's sessions exhaust it. New clients get EMFILE at once
// (not a hello timeout), the log says so a bounded number of times, the
// well-behaved client keeps going, and sessions work again once the
// hostile client is gone.
func TestAcceptOutOfFDs(t *testing.T) {
	d := daemontest.Start(t, "nofile", daemontest.Options{Ports: nextPorts()})
	by := startBystander(t, d)
	by.progressed(t, "warm-up")
	lim := uint64(openFDs(t, d.PID()) + 24)
	if err := setNofile(d.PID(), lim); err != nil {
		t.Skipf("cannot lower the daemon's descriptor limit: %v", err)
	}
	p := spawnHostile(t, "sessions", d.Sock, "")
	t.Logf("the hostile client holds %s sessions (descriptor limit %d)", p.info, lim)
	// Where the helper's last session failed (in accept or while setting
	// the session up) depends on timing; lower the limit to what the
	// daemon holds now so that the clients below fail in accept(2) itself,
	// the case the reserve descriptor is for.
	// The helper's last, failed session may still be giving its
	// descriptors back: wait until the count holds still. The limit is on
	// descriptor numbers, not their count: the lowest free number is the
	// limit under which none is left.
	held := openFDs(t, d.PID())
	for i, same := 0, 0; i < 200 && same < 5; i++ {
		time.Sleep(10 * time.Millisecond)
		if n := openFDs(t, d.PID()); n == held {
			same++
		} else {
			held, same = n, 0
		}
	}
	lim = uint64(lowestFreeFD(t, d.PID()))
	if err := setNofile(d.PID(), lim); err != nil {
		t.Fatalf("lowering the daemon's descriptor limit to %d: %v", lim, err)
	}
	// A descriptor the daemon held for a moment when it was counted (a
	// file it reads, a session still closing) can come free: an open may
	// then succeed, and is kept so that it uses that descriptor up. What
	// must never happen is any other error (a hello timeout: the client
	// left waiting in the backlog).
	refused := 0
	var kept []*ofverbs.Context
	defer func() {
		for _, c := range kept {
			c.Close()
		}
	}()
	for i := 0; i < 20 && refused < 10; i++ {
		c, err := ofverbs.Open(ofverbs.WithSocket(d.Sock), ofverbs.WithHelloTimeout(daemontest.Scaled(5*time.Second)))
		if err == nil {
			kept = append(kept, c)
			continue
		}
		if !errors.Is(err, unix.EMFILE) {
			t.Fatalf("open %d while the daemon is out of descriptors: %v; want EMFILE at once", i, err)
		}
		refused++
	}
	if refused < 10 {
		t.Fatalf("only %d of 20 opens were refused while the daemon is out of descriptors (%d succeeded)", refused, len(kept))
	}
	// One free descriptor: accept(2) succeeds, and the session cannot get
	// the descriptors it needs (doorbell, pidfd): that client must get
	// EMFILE too, from the session.
	lim = uint64(lowestFreeFD(t, d.PID())) + 1
	if err := setNofile(d.PID(), lim); err != nil {
		t.Fatalf("raising the daemon's descriptor limit to %d: %v", lim, err)
	}
	if c, err := ofverbs.Open(ofverbs.WithSocket(d.Sock), ofverbs.WithHelloTimeout(daemontest.Scaled(5*time.Second))); err == nil {
		kept = append(kept, c)
		t.Errorf("a session opened with one free descriptor in the daemon (it needs more)")
	} else if !errors.Is(err, unix.EMFILE) {
		t.Fatalf("open with one free descriptor in the daemon: %v; want EMFILE at once", err)
	}
	by.progressed(t, "descriptors exhausted")
	if !strings.Contains(d.Stderr.String(), "too many open files") {
		t.Errorf("the daemon did not log an accept failure; the refusals above did not exercise accept(2) out of descriptors")
	}
	if n := strings.Count(d.Stderr.String(), "accepting control connections"); n > 5 {
		t.Errorf("the accept failure was logged %d times (want a rate-limited few)", n)
	}
	p.kill()
	daemontest.Eventually(t, "a new session once descriptors are free", 10*time.Second, func() bool {
		c, err := ofverbs.Open(ofverbs.WithSocket(d.Sock), ofverbs.WithHelloTimeout(daemontest.Scaled(5*time.Second)))
		if err != nil {
			return false
		}
		c.Close()
		return true
	})
	by.progressed(t, "after the attack")
}
