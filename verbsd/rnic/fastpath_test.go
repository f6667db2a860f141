package rnic

import (
	"encoding/binary"
	"errors"
	"math"
	"testing"
	"time"

	"github.com/iwarpd/iwarpd/proto"
	"golang.org/x/sys/unix"
)

// fpPage makes a client's fast-path page (a sealed memfd, every page
// written) and returns the client's mapping and a descriptor for the daemon.
func fpPage(t *testing.T, magic bool) ([]byte, int) {
	t.Helper()
	fd, err := unix.MemfdCreate("fastpath", unix.MFD_CLOEXEC|unix.MFD_ALLOW_SEALING)
	if err != nil {
		t.Fatal(err)
	}
	if err := unix.Ftruncate(fd, proto.FastpathPageLen); err != nil {
		t.Fatal(err)
	}
	if _, err := unix.FcntlInt(uintptr(fd), unix.F_ADD_SEALS, unix.F_SEAL_SHRINK|unix.F_SEAL_GROW); err != nil {
		t.Fatal(err)
	}
	mem, err := unix.Mmap(fd, 0, proto.FastpathPageLen, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { unix.Munmap(mem); unix.Close(fd) })
	for i := range mem {
		mem[i] = 0xa5 // every page the client's, and garbage where the daemon writes
	}
	if magic {
		binary.LittleEndian.PutUint32(mem[proto.OffFPMagic:], proto.FastpathMagic)
		binary.LittleEndian.PutUint16(mem[proto.OffFPVersion:], proto.FastpathVersion)
	}
	dfd, err := unix.Dup(fd)
	if err != nil {
		t.Fatal(err)
	}
	return mem, dfd
}

func TestFastpathPageChecks(t *testing.T) {
	_, fd := fpPage(t, false)
	if _, err := NewFastpath(fd); !errors.Is(err, unix.EINVAL) {
		t.Errorf("a page without Magic: %v, want EINVAL", err)
	}
	mem, fd := fpPage(t, true)
	f, err := NewFastpath(fd)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	le := binary.LittleEndian
	if o, w := le.Uint32(mem[proto.OffFPOwner:]), le.Uint32(mem[proto.OffFPWant:]); o != proto.FPOwnerDaemon || w != 0 {
		t.Errorf("after the hand-over Owner %d Want %d, want the engine's and 0", o, w)
	}
	if n := le.Uint64(mem[proto.OffFPTakeovers:]); n != 0 {
		t.Errorf("Takeovers %d after the hand-over", n)
	}
}

// TestFastpathLease: the lease is the client's word; a value in the future
// beyond the skew, or negative, is expired, and the deadline the engine
// sleeps to is never further than the lease from now.
func TestFastpathLease(t *testing.T) {
	mem, fd := fpPage(t, true)
	f, err := NewFastpath(fd)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	q := &QP{FP: f}
	f.state = fpRank
	const lease = time.Millisecond
	now := time.Now()
	n := MonoNS(now)
	var ts unix.Timespec
	unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts)
	if d := ts.Nano() - MonoNS(time.Now()); d < -int64(time.Millisecond) || d > int64(time.Millisecond) {
		t.Errorf("MonoNS is %d ns off CLOCK_MONOTONIC", d)
	}
	for _, c := range []struct {
		lease   int64
		expired bool
	}{
		{n, false}, {n - int64(lease)/2, false}, {n - 2*int64(lease), true}, {n + int64(time.Millisecond), false},
		{n + 2*proto.FPLeaseSkew, true}, {-1, true}, {math.MinInt64, true}, {math.MaxInt64, true}, {0, true},
	} {
		binary.LittleEndian.PutUint64(mem[proto.OffFPLease:], uint64(c.lease))
		if got := f.expired(now, lease); got != c.expired {
			t.Errorf("lease %d (now %d): expired %v, want %v", c.lease, n, got, c.expired)
		}
		d, ok := q.FastpathDeadline(lease)
		if !ok {
			t.Fatalf("lease %d: no deadline while the rank owns the socket", c.lease)
		}
		if limit := time.Now().Add(lease + proto.FPLeaseSkew); d.After(limit) {
			t.Errorf("lease %d: deadline %v after now, beyond lease and skew", c.lease, d.Sub(now))
		}
	}
}
