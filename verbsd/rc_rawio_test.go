package verbsd

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"
	"unsafe"

	"github.com/iwarpd/iwarpd/verbsd/rc"
	"github.com/iwarpd/iwarpd/verbsd/rnic"
	"golang.org/x/sys/unix"
)

// TestRawIO checks the engine's raw system calls (rnic/iov.go) on a connected
// non-blocking TCP pair: a gather write of several slices (empty ones
// skipped) arrives whole and in order through a scatter read; an empty
// socket reports EAGAIN as an errno; empty vectors do nothing; a
// zero-timeout epoll sees the readable socket.
func TestRawIO(t *testing.T) {
	a, b := tcpPair(t)
	if got := rnic.AppendIovecs(nil, nil, []byte{}, []byte("x")); len(got) != 1 || got[0].Len != 1 {
		t.Fatalf("appendIovecs kept empty slices: %+v", got)
	}
	if n, err := rnic.RawWritev(a, nil); n != 0 || err != nil {
		t.Fatalf("rawWritev(empty) = %d, %v", n, err)
	}
	if n, err := rnic.RawReadv(b, nil); n != 0 || err != nil {
		t.Fatalf("rawReadv(empty) = %d, %v", n, err)
	}
	var buf [64]byte
	if _, err := rnic.RawReadv(b, rnic.AppendIovecs(nil, buf[:])); !errors.Is(err, unix.EAGAIN) {
		t.Fatalf("rawReadv on an empty socket: %v, want EAGAIN", err)
	}

	ep, err := unix.EpollCreate1(unix.EPOLL_CLOEXEC)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(ep)
	if err := unix.EpollCtl(ep, unix.EPOLL_CTL_ADD, b, &unix.EpollEvent{Events: unix.EPOLLIN, Fd: int32(b)}); err != nil {
		t.Fatal(err)
	}
	var evs [4]unix.EpollEvent
	if n, err := rnic.RawEpollPoll(ep, evs[:]); n != 0 || err != nil {
		t.Fatalf("rawEpollPoll before any data = %d, %v", n, err)
	}

	parts := [][]byte{[]byte("length"), nil, bytes.Repeat([]byte{0xab}, 5000), []byte("crc!")}
	want := bytes.Join(parts, nil)
	n, err := rnic.RawWritev(a, rnic.AppendIovecs(nil, parts...))
	if err != nil || n != len(want) {
		t.Fatalf("rawWritev = %d, %v; want %d", n, err, len(want))
	}
	got := make([]byte, 0, len(want))
	head, rest := make([]byte, 10), make([]byte, len(want))
	deadline := time.Now().Add(rcWait)
	for i := 0; len(got) < len(want); i++ {
		if i > 10000 || time.Now().After(deadline) {
			t.Fatalf("read %d of %d octets before the deadline", len(got), len(want))
		}
		if k, _ := rnic.RawEpollPoll(ep, evs[:]); k == 0 {
			time.Sleep(time.Millisecond)
			continue
		}
		h := head[:min(len(head), len(want)-len(got))]
		k, err := rnic.RawReadv(b, rnic.AppendIovecs(nil, h, rest[:len(want)-len(got)-len(h)]))
		if errors.Is(err, unix.EAGAIN) {
			continue
		}
		if err != nil || k == 0 {
			t.Fatalf("rawReadv = %d, %v", k, err)
		}
		got = append(got, h[:min(k, len(h))]...)
		if k > len(h) {
			got = append(got, rest[:k-len(h)]...)
		}
	}
	if !bytes.Equal(got, want) {
		t.Fatal("octets differ after a gather write and scatter reads")
	}
}

// TestMapRegionPopulated checks that registering memory fills the
// daemon's page tables for the pages the client has (prefaultResident,
// rnic/memory.go), so the data path takes no page fault on them. (A
// region with pages the client never touched is refused: holeguard_test.go.)
// The daemon's share is read as the mapping's Rss in /proc/self/smaps
// (pages this process maps).
func TestMapRegionPopulated(t *testing.T) {
	const size = 256 << 10
	// A sealed memfd made by hand (shm.Create populates all of it).
	fd, err := unix.MemfdCreate("populate", unix.MFD_CLOEXEC|unix.MFD_ALLOW_SEALING)
	if err != nil {
		t.Fatal(err)
	}
	if err := unix.Ftruncate(fd, size); err != nil {
		t.Fatal(err)
	}
	if _, err := unix.FcntlInt(uintptr(fd), unix.F_ADD_SEALS, unix.F_SEAL_SHRINK|unix.F_SEAL_GROW); err != nil {
		t.Fatal(err)
	}
	client, err := unix.Mmap(fd, 0, size, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Munmap(client)
	for i := 0; i < size; i += unix.Getpagesize() {
		client[i] = 1 // the client allocates every page
	}
	m, err := rnic.MapRegion(fd, 0, size)
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	vec := make([]byte, len(m.Pages)/unix.Getpagesize())
	if _, _, errno := unix.Syscall(unix.SYS_MINCORE, uintptr(unsafe.Pointer(&m.Pages[0])), uintptr(len(m.Pages)),
		uintptr(unsafe.Pointer(&vec[0]))); errno != 0 {
		t.Fatalf("mincore: %v", errno)
	}
	for i, v := range vec {
		if v&1 == 0 {
			t.Fatalf("page %d of %d: not resident after mapRegion", i, len(vec))
		}
	}
	rss, err := mappingRss(uintptr(unsafe.Pointer(&m.Pages[0])))
	if err != nil {
		t.Fatal(err)
	}
	if rss != size {
		t.Fatalf("the daemon maps %d octets of the region; want all %d (prefaulted)", rss, size)
	}
}

// mappingRss reads the Rss of the mapping starting at addr from
// /proc/self/smaps.
func mappingRss(addr uintptr) (int, error) {
	b, err := os.ReadFile("/proc/self/smaps")
	if err != nil {
		return 0, err
	}
	prefix := fmt.Sprintf("%x-", addr)
	in := false
	for _, line := range strings.Split(string(b), "\n") {
		if strings.HasPrefix(line, prefix) {
			in = true
			continue
		}
		if in && strings.HasPrefix(line, "Rss:") {
			var kb int
			if _, err := fmt.Sscanf(strings.TrimPrefix(line, "Rss:"), "%d", &kb); err != nil {
				return 0, err
			}
			return kb << 10, nil
		}
	}
	return 0, fmt.Errorf("no mapping at %#x in /proc/self/smaps", addr)
}

// TestRCSocketBuffers checks that an attached RC socket has its buffers
// forced to rcSocketBuffer when the daemon may force them (the kernel
// reports twice the size set, for its bookkeeping).
func TestRCSocketBuffers(t *testing.T) {
	probe, err := unix.Socket(unix.AF_INET, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	err = unix.SetsockoptInt(probe, unix.SOL_SOCKET, unix.SO_SNDBUFFORCE, rc.SocketBuffer)
	unix.Close(probe)
	if err != nil {
		t.Skipf("cannot force socket buffers here (%v): autotuning is kept, nothing to check", err)
	}
	a, _ := rcPairOf(t, 4096, true, false, 0)
	var snd, rcv int
	if err := a.engineQP(func(q *rc.QP) error {
		var err error
		if snd, err = unix.GetsockoptInt(q.Conn.Fd, unix.SOL_SOCKET, unix.SO_SNDBUF); err != nil {
			return err
		}
		rcv, err = unix.GetsockoptInt(q.Conn.Fd, unix.SOL_SOCKET, unix.SO_RCVBUF)
		return err
	}); err != nil {
		t.Fatal(err)
	}
	if snd < rc.SocketBuffer || rcv < rc.SocketBuffer {
		t.Fatalf("SO_SNDBUF %d, SO_RCVBUF %d; want at least %d", snd, rcv, rc.SocketBuffer)
	}
}
