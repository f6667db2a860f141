package main

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/iwarpd/iwarpd/proto"
	"golang.org/x/sys/unix"
)

// defaultSocket mirrors iwarpd's default: IWARPD_SOCKET when set, else
// /run/iwarpd/iwarpd.sock for root, else under $XDG_RUNTIME_DIR (or the
// temporary directory when that is unset).
func defaultSocket(getenv func(string) string) string {
	if p := getenv("IWARPD_SOCKET"); p != "" {
		return p
	}
	if os.Geteuid() == 0 {
		return "/run/iwarpd/iwarpd.sock"
	}
	if dir := getenv("XDG_RUNTIME_DIR"); dir != "" {
		return filepath.Join(dir, "iwarpd", "iwarpd.sock")
	}
	return filepath.Join(os.TempDir(), fmt.Sprintf("iwarpd-%d", os.Geteuid()), "iwarpd.sock")
}

// errNotRunning wraps a failure to reach the daemon at all (exit status 3).
type errNotRunning struct {
	path string
	err  error
}

func (e *errNotRunning) Error() string {
	return fmt.Sprintf("iwarpd is not running at %s: %v", e.path, e.err)
}

func (e *errNotRunning) Unwrap() error { return e.err }

// errPermission is a refusal to connect (EACCES/EPERM on the socket): the
// daemon runs, but this user may not talk to it (exit status 4).
type errPermission struct {
	path string
	err  error
}

func (e *errPermission) Error() string {
	return fmt.Sprintf("permission denied connecting to iwarpd at %s (%v): use an account in the socket's group (iwarpd -socket-group) or run as root", e.path, e.err)
}

func (e *errPermission) Unwrap() error { return e.err }

// replyTimeout bounds every wait for the daemon, so iwarpctl never hangs on
// a stuck daemon.
const replyTimeout = 5 * time.Second

// inspect opens an inspect session (HelloRequest{Inspect: true}), asks for
// the daemon's state with OpInspect and closes the session.
func inspect(path string) (*proto.Inspect, error) {
	conn, err := proto.Dial(path)
	if err != nil {
		if errors.Is(err, unix.EACCES) || errors.Is(err, unix.EPERM) {
			return nil, &errPermission{path: path, err: err}
		}
		return nil, &errNotRunning{path: path, err: err}
	}
	defer conn.Close()
	if err := conn.UnixConn().SetDeadline(time.Now().Add(replyTimeout)); err != nil {
		return nil, err
	}
	var hello proto.HelloReply
	if err := call(conn, proto.OpHello, 1, proto.HelloRequest{ABI: proto.ABIVersion, Client: "iwarpctl", Inspect: true}, &hello); err != nil {
		return nil, err
	}
	in := &proto.Inspect{}
	if err := call(conn, proto.OpInspect, 2, nil, in); err != nil {
		return nil, err
	}
	if in.Daemon == "" {
		in.Daemon = hello.Daemon
	}
	return in, nil
}

// daemonError is an error reply of the daemon.
type daemonError struct {
	op     proto.Op
	status error
	msg    string
}

func (e *daemonError) Error() string {
	if e.msg == "" {
		return fmt.Sprintf("iwarpd refused %v: %v", e.op, e.status)
	}
	return fmt.Sprintf("iwarpd refused %v: %v: %s", e.op, e.status, e.msg)
}

func (e *daemonError) Unwrap() error { return e.status }

// call sends one request and waits for its reply, skipping asynchronous
// events; it decodes a successful reply into out.
func call(conn *proto.Conn, op proto.Op, seq uint32, body, out any) error {
	if err := conn.Send(proto.Header{Version: proto.ABIVersion, Op: op, Seq: seq}, body); err != nil {
		return fmt.Errorf("iwarpctl: %v: %w", op, err)
	}
	for {
		h, rbody, fds, err := conn.Receive()
		for _, fd := range fds {
			closeFD(fd) // an inspect session expects none
		}
		if err != nil {
			return fmt.Errorf("iwarpctl: waiting for the %v reply: %w", op, err)
		}
		if h.Op == proto.OpEvent {
			continue
		}
		if h.Version != proto.ABIVersion {
			return fmt.Errorf("iwarpctl: %w", &proto.VersionError{Local: proto.ABIVersion, Peer: h.Version, Side: "client"})
		}
		if h.Op != op|proto.OpReply || h.Seq != seq {
			return fmt.Errorf("iwarpctl: expected the %v reply (seq %d), got %v (seq %d)", op, seq, h.Op, h.Seq)
		}
		if h.Status != 0 {
			var eb proto.ErrorBody
			_ = proto.Unmarshal(rbody, &eb) // the errno alone still says what failed
			return &daemonError{op: op, status: h.Status, msg: eb.Error}
		}
		if out == nil {
			return nil
		}
		if err := proto.Unmarshal(rbody, out); err != nil {
			return fmt.Errorf("iwarpctl: %v reply: %w", op, err)
		}
		return nil
	}
}
