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

// maxPages bounds the pages iwarpctl fetches: every page carries at least
// one object, so this is far above any state a daemon can hold
// (proto.InspectCursor always moves forward; see inspect).
const maxPages = 1 << 16

// inspect opens an inspect session (HelloRequest{Inspect: true}), fetches
// the daemon's state page by page with OpInspect (proto.InspectRequest,
// following each reply's Next while More is set), merges the pages and
// closes the session.
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
	var in *proto.Inspect
	var cur proto.InspectCursor
	for i := 0; ; i++ {
		if i == maxPages {
			return nil, fmt.Errorf("iwarpctl: the daemon's state did not end after %d inspect pages", maxPages)
		}
		if err := conn.UnixConn().SetDeadline(time.Now().Add(replyTimeout)); err != nil {
			return nil, err
		}
		page := &proto.Inspect{}
		if err := call(conn, proto.OpInspect, uint32(2+i), proto.InspectRequest{Cursor: cur}, page); err != nil {
			return nil, err
		}
		in = mergePage(in, page)
		if !page.More {
			break
		}
		if page.Next == nil || !cursorAfter(*page.Next, cur) {
			return nil, fmt.Errorf("iwarpctl: inspect page %d says more follows but its cursor %+v does not move past %+v", i, page.Next, cur)
		}
		cur = *page.Next
	}
	in.More, in.Next = false, nil
	if in.Daemon == "" {
		in.Daemon = hello.Daemon
	}
	return in, nil
}

func cursorAfter(next, cur proto.InspectCursor) bool {
	return next.Session > cur.Session || next.Session == cur.Session && next.Handle > cur.Handle
}

// mergePage adds page to the state gathered so far (nil: none). The device,
// port and counters are those of the last page (the newest); a session
// split across pages is joined by appending its objects.
func mergePage(in, page *proto.Inspect) *proto.Inspect {
	if in == nil {
		return page
	}
	sessions := in.Sessions
	for _, s := range page.Sessions {
		if n := len(sessions); n > 0 && sessions[n-1].ID == s.ID {
			last := &sessions[n-1]
			last.MRs = append(last.MRs, s.MRs...)
			last.CQs = append(last.CQs, s.CQs...)
			last.QPs = append(last.QPs, s.QPs...)
			continue
		}
		sessions = append(sessions, s)
	}
	page.Sessions = sessions
	return page
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
