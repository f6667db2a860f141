package main

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"slices"
	"strings"
	"syscall"
	"time"
)

// oobVersion is the version of the out-of-band exchange.
const oobVersion = 1

// hello is what each side announces first: the test it was asked to run and
// its data address. Both sides compare everything but the address.
type hello struct {
	Version    int    `json:"version"`
	Test       string `json:"test"`
	Op         string `json:"op"`
	Transport  string `json:"transport"`
	Sizes      []int  `json:"sizes"`
	Iterations int    `json:"iterations"`
	Window     int    `json:"window"`
	QPs        int    `json:"qps"`
	// Addr is the data address; with -qps N, the N QPs' addresses joined
	// by commas, in QP order.
	Addr string `json:"addr"`
	// Buffer is the memory this side exposes to the peer's RDMA Writes or
	// Reads (-t rc -o write|read).
	Buffer *remoteBuffer `json:"buffer,omitempty"`
	// Buffers are the regions of the N QPs of -qps N -o write, in QP order.
	Buffers []*remoteBuffer `json:"buffers,omitempty"`
}

// remoteBuffer is a registered region the peer may access with RDMA: its
// address (the tagged offset of its first octet), STag and length.
type remoteBuffer struct {
	Addr uint64 `json:"addr"`
	RKey uint32 `json:"rkey"`
	Len  uint64 `json:"len"`
}

// oobMsg is one JSON line of the out-of-band connection.
type oobMsg struct {
	Type string `json:"type"` // hello, ready, finished (read), done, report, error
	// hello
	Hello *hello `json:"hello,omitempty"`
	// ready, finished, done: the size concerned; done: the server side's
	// verification
	Size       int    `json:"size,omitempty"`
	Verified   int64  `json:"verified,omitempty"`
	Mismatches int64  `json:"mismatches,omitempty"`
	FirstError string `json:"first_error,omitempty"`
	// report (client to server at the end)
	Report *report `json:"report,omitempty"`
	// error: the peer failed and says why
	Error string `json:"error,omitempty"`
}

// oob is the out-of-band channel: JSON lines over TCP.
type oob struct {
	conn net.Conn
	enc  *json.Encoder
	dec  *json.Decoder
}

func newOOB(c net.Conn) *oob {
	return &oob{conn: c, enc: json.NewEncoder(c), dec: json.NewDecoder(bufio.NewReader(c))}
}

// errPeer is an error the peer reported over the out-of-band channel.
type errPeer struct{ msg string }

func (e *errPeer) Error() string { return "peer failed: " + e.msg }

func (o *oob) send(m oobMsg) error {
	if err := o.enc.Encode(m); err != nil {
		return fmt.Errorf("out-of-band send (%s): %w", m.Type, err)
	}
	return nil
}

// recv reads the next message, which must be of type want (an error
// message from the peer becomes *errPeer). timeout bounds the wait (0: none).
func (o *oob) recv(want string, timeout time.Duration) (oobMsg, error) {
	if timeout > 0 {
		o.conn.SetReadDeadline(time.Now().Add(timeout))
		defer o.conn.SetReadDeadline(time.Time{})
	}
	var m oobMsg
	if err := o.dec.Decode(&m); err != nil {
		return m, fmt.Errorf("out-of-band: waiting for %s: %w", want, err)
	}
	if m.Type == "error" {
		return m, &errPeer{msg: m.Error}
	}
	if m.Type != want {
		return m, fmt.Errorf("out-of-band: got %q, want %q", m.Type, want)
	}
	return m, nil
}

// fail tells the peer why this side gives up (best effort).
func (o *oob) fail(err error) {
	o.conn.SetWriteDeadline(time.Now().Add(time.Second))
	o.send(oobMsg{Type: "error", Error: err.Error()})
}

// peerError returns the error the peer reported, if one arrives within d:
// used to explain a data-path timeout by the peer's own failure.
func (o *oob) peerError(d time.Duration) error {
	_, err := o.recv("error", d)
	var pe *errPeer
	if errors.As(err, &pe) {
		return pe
	}
	return nil
}

func (o *oob) close() error { return o.conn.Close() }

// agree compares the two sides' hellos and lists every difference.
func agree(client, server hello) error {
	var diffs []string
	diff := func(flag string, c, s any) {
		diffs = append(diffs, fmt.Sprintf("%s: client %v, server %v", flag, c, s))
	}
	if client.Version != server.Version {
		diff("version", client.Version, server.Version)
	}
	if client.Test != server.Test {
		diff("-m", client.Test, server.Test)
	}
	if client.Op != server.Op {
		diff("-o", client.Op, server.Op)
	}
	if client.Transport != server.Transport {
		diff("-t/-raw", client.Transport, server.Transport)
	}
	if !slices.Equal(client.Sizes, server.Sizes) {
		diff("-s/-a sizes", client.Sizes, server.Sizes)
	}
	if client.Iterations != server.Iterations {
		diff("-n", client.Iterations, server.Iterations)
	}
	if client.Window != server.Window {
		diff("-window", client.Window, server.Window)
	}
	if client.QPs != server.QPs {
		diff("-qps", client.QPs, server.QPs)
	}
	if len(diffs) > 0 {
		return fmt.Errorf("client and server disagree (run both with the same flags): %s", strings.Join(diffs, "; "))
	}
	return nil
}

// listenOOB listens on the out-of-band port on every address.
func listenOOB(port int) (net.Listener, error) {
	l, err := net.Listen("tcp", fmt.Sprintf(":%d", port))
	if err != nil {
		return nil, fmt.Errorf("out-of-band listen on port %d: %w", port, err)
	}
	return l, nil
}

// dialOOB connects to the server, retrying while it is not listening yet
// (connection refused) for at most timeout.
func dialOOB(server string, port int, timeout time.Duration) (net.Conn, error) {
	addr := net.JoinHostPort(server, fmt.Sprint(port))
	deadline := time.Now().Add(timeout)
	for {
		c, err := net.DialTimeout("tcp", addr, timeout)
		if err == nil {
			return c, nil
		}
		if !errors.Is(err, syscall.ECONNREFUSED) || time.Now().After(deadline) {
			return nil, fmt.Errorf("out-of-band connect to %s: %w", addr, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}
