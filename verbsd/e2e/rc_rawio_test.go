package e2e

import (
	"bytes"
	"errors"
	"testing"
	"time"

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

// TestRCSocketBuffers checks that an attached RC socket has its buffers
// forced to SocketBuffer when the daemon may force them (the kernel
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
