package rc

import (
	"bytes"
	"errors"
	"io"
	"testing"

	"golang.org/x/sys/unix"
)

// testPayload is test data: n octets that differ with i.
func testPayload(i, n int) []byte {
	p := make([]byte, n)
	for k := range p {
		p[k] = byte(i*31 + k*7 + 1)
	}
	return p
}

// TestRCRxReaderUnit drives reader over a socket pair: whole-buffer
// reads while the stream carries small FPDUs, direct reads with a small
// look-ahead once a large one is seen, EOF, and the buffer going back to
// the pool when empty.
func TestRCRxReaderUnit(t *testing.T) {
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_NONBLOCK, 0)
	if err != nil {
		t.Fatal(err)
	}
	rd := &reader{fd: fds[1]}
	data := testPayload(3, 5000)
	if _, err := unix.Write(fds[0], data); err != nil {
		t.Fatal(err)
	}
	// Small FPDUs seen: a 2-octet read brings in everything.
	for range rxSmallRun {
		rd.observe(100)
	}
	var hdr [2]byte
	if n, err := rd.Read(hdr[:]); n != 2 || err != nil {
		t.Fatalf("Read = %d, %v", n, err)
	}
	if !rd.pending() || rd.w-rd.r != len(data)-2 || rd.takeCalls() != 1 {
		t.Fatalf("after one read: %d octets buffered, want %d", rd.w-rd.r, len(data)-2)
	}
	rest := make([]byte, len(data))
	n, _ := rd.Read(rest)
	if n != len(data)-2 || rd.pending() || rd.buf != nil || rd.takeCalls() != 0 {
		t.Fatalf("served %d from the buffer (pending %v, buffer held %v)", n, rd.pending(), rd.buf != nil)
	}
	if !bytes.Equal(append(hdr[:], rest[:n]...), data) {
		t.Fatal("octets differ")
	}
	// That whole-buffer read came back short: the socket was empty, and
	// until the receive loop rearms, the reader does not ask it again
	// (octets that arrive since are left to the next pass's epoll).
	if _, err := unix.Write(fds[0], data); err != nil {
		t.Fatal(err)
	}
	if n, err := rd.Read(hdr[:]); n != 0 || err != unix.EAGAIN || rd.takeCalls() != 0 {
		t.Fatalf("after a short read: Read = %d, %v, want EAGAIN without a readv", n, err)
	}
	rd.rearm()
	// A large FPDU seen: a small read looks ahead readAhead octets only.
	rd.observe(rxDirect)
	if n, err := rd.Read(hdr[:]); n != 2 || err != nil {
		t.Fatalf("Read = %d, %v", n, err)
	}
	if rd.w-rd.r != readAhead || rd.takeCalls() != 1 {
		t.Fatalf("%d octets buffered after a large FPDU, want %d", rd.w-rd.r, readAhead)
	}
	rd.reset()
	if rd.pending() || rd.buf != nil {
		t.Fatal("reset kept the buffer")
	}
	if _, err := rd.Read(rest); err != nil {
		t.Fatal(err)
	}
	// A short look-ahead read does not make the reader dry: a large
	// payload arrives in pieces, and the next readv asks the socket.
	if _, err := rd.Read(rest); err != unix.EAGAIN || rd.buf != nil || rd.takeCalls() != 2 {
		t.Fatalf("empty socket: %v (buffer held %v), want EAGAIN", err, rd.buf != nil)
	}
	unix.Close(fds[0])
	if _, err := rd.Read(rest); !errors.Is(err, io.EOF) {
		t.Fatalf("closed peer: %v, want EOF", err)
	}
	unix.Close(fds[1])
}
