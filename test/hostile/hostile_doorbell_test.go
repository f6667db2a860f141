package hostile

import (
	"encoding/binary"
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/iwarpd/iwarpd/test/daemontest"
	"github.com/iwarpd/iwarpd/verbsd/verbsdtest"
	"golang.org/x/sys/unix"
)

// Issue 13, point 1: a client's doorbell must not let it stop the engine
// or steal another session's wake-ups.

func init() {
	helpers["bell-block"] = helperBellBlock
	helpers["bell-race"] = helperBellRace
	helpers["bell-fill"] = helperBellFill
	helpers["bell-steal"] = helperBellSteal
}

// helperBellSteal reads its doorbell in a non-blocking loop and never rings
// it: with one doorbell for every session it consumed the other clients'
// rings before the sleeping engine saw them.
func helperBellSteal() int {
	c, err := verbsdtest.Dial(os.Getenv(envSock), false)
	if err != nil {
		return helperFail("dial: %v", err)
	}
	helperReady()
	deadline := time.Now().Add(helperLifetime())
	var b [8]byte
	for i := 0; i < 1_000_000_000 && time.Now().Before(deadline); i++ {
		unix.Read(c.Bell, b[:])
	}
	return 0
}

// helperBellBlock clears O_NONBLOCK on its doorbell and waits in blocking
// reads on it, in several threads: with one doorbell for every session, a
// ring of another client woke both the sleeping engine and a reader, and
// when the reader won, the engine's read after epoll_wait blocked forever
// (data path, control and SIGTERM hung) or the ring was lost.
func helperBellBlock() int {
	c, err := verbsdtest.Dial(os.Getenv(envSock), false)
	if err != nil {
		return helperFail("dial: %v", err)
	}
	fl, err := unix.FcntlInt(uintptr(c.Bell), unix.F_GETFL, 0)
	if err != nil {
		return helperFail("F_GETFL: %v", err)
	}
	if _, err := unix.FcntlInt(uintptr(c.Bell), unix.F_SETFL, fl&^unix.O_NONBLOCK); err != nil {
		return helperFail("F_SETFL: %v", err)
	}
	for range 4 {
		go func() {
			var b [8]byte
			for i := 0; i < 100_000_000; i++ {
				unix.Read(c.Bell, b[:])
			}
		}()
	}
	helperReady()
	time.Sleep(helperLifetime())
	return 0
}

// helperBellRace clears O_NONBLOCK on its doorbell, then rings it and at
// once reads it back, in several threads (the engine must never be inside
// a read of it).
func helperBellRace() int {
	c, err := verbsdtest.Dial(os.Getenv(envSock), false)
	if err != nil {
		return helperFail("dial: %v", err)
	}
	fl, err := unix.FcntlInt(uintptr(c.Bell), unix.F_GETFL, 0)
	if err != nil {
		return helperFail("F_GETFL: %v", err)
	}
	if _, err := unix.FcntlInt(uintptr(c.Bell), unix.F_SETFL, fl&^unix.O_NONBLOCK); err != nil {
		return helperFail("F_SETFL: %v", err)
	}
	deadline := time.Now().Add(helperLifetime())
	one := binary.NativeEndian.AppendUint64(nil, 1)
	for range 3 {
		go func() {
			var b [8]byte
			for i := 0; i < 100_000_000 && time.Now().Before(deadline); i++ {
				unix.Write(c.Bell, one)
				pfd := []unix.PollFd{{Fd: int32(c.Bell), Events: unix.POLLIN}}
				if n, _ := unix.Poll(pfd, 0); n == 1 {
					unix.Read(c.Bell, b[:]) // may block: another thread rings
				}
			}
		}()
	}
	helperReady()
	time.Sleep(time.Until(deadline))
	return 0
}

// helperBellFill fills its doorbell's counter (its later rings fail with
// EAGAIN) and clears O_NONBLOCK: that may stall its own session only.
func helperBellFill() int {
	c, err := verbsdtest.Dial(os.Getenv(envSock), false)
	if err != nil {
		return helperFail("dial: %v", err)
	}
	full := binary.NativeEndian.AppendUint64(nil, 0xfffffffffffffffe)
	if _, err := unix.Write(c.Bell, full); err != nil {
		return helperFail("filling the doorbell: %v", err)
	}
	fl, _ := unix.FcntlInt(uintptr(c.Bell), unix.F_GETFL, 0)
	unix.FcntlInt(uintptr(c.Bell), unix.F_SETFL, fl&^unix.O_NONBLOCK)
	helperReady()
	time.Sleep(helperLifetime())
	return 0
}

// TestDoorbellHostile: hostile clients block, drain and fill their
// doorbells while a well-behaved client exchanges messages; the daemon
// keeps serving it, iwarpctl answers, and SIGTERM stops the daemon.
func TestDoorbellHostile(t *testing.T) {
	for _, mode := range []string{"bell-steal", "bell-block", "bell-race", "bell-fill"} {
		t.Run(mode, func(t *testing.T) {
			d := daemontest.Start(t, "bell", daemontest.Options{Ports: nextPorts()})
			by := startBystander(t, d)
			by.progressed(t, "warm-up")
			spawnHostile(t, mode, d.Sock, "")
			by.progressed(t, mode)
			if out, code := ctl(t, d.Sock, "sessions"); code != 0 {
				t.Fatalf("iwarpctl during %s: exit %d: %s", mode, code, out)
			}
			for i := range 20 {
				by.progressed(t, fmt.Sprintf("%s, later (%d)", mode, i))
			}
			by.end()
			if !d.Stop() {
				t.Fatal("SIGTERM did not stop the daemon within the bound: the engine is blocked")
			}
		})
	}
}
