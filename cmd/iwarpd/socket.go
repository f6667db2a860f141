package main

import (
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"syscall"
	"time"

	"github.com/iwarpd/iwarpd/internal/sockdir"
)

// errDaemonRunning means another daemon answers on the control socket.
var errDaemonRunning = errors.New("another iwarpd is already serving this socket")

// listenControl creates the control socket (SOCK_SEQPACKET) at path, owned
// by group gid when gid >= 0: it refuses to start when a
// live daemon answers there, replaces a stale socket file left by a daemon
// that died, and creates the socket under umask 077 before setting mode, so
// that no client can connect before the permissions are final (the habit of
// wireguard-go's ipc).
func listenControl(path string, mode os.FileMode, gid int) (*net.UnixListener, error) {
	// A directory we create is 0755 (group members of -socket-group must
	// reach the socket; its own mode says who may connect). An existing
	// directory must be ours or root's and writable by no one else
	// (internal/sockdir): MkdirAll succeeds on a directory another user
	// created to receive our clients' memory.
	dir := filepath.Dir(path)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("control socket directory: %w", err)
	}
	if err := sockdir.Check(dir, os.Geteuid()); err != nil {
		return nil, fmt.Errorf("control socket: %w", err)
	}
	if fi, err := os.Lstat(path); err == nil {
		if fi.Mode()&os.ModeSocket == 0 {
			return nil, fmt.Errorf("control socket %s: exists and is not a socket; remove it or choose another -socket", path)
		}
		conn, err := net.DialTimeout("unixpacket", path, time.Second)
		if err == nil {
			conn.Close()
			return nil, fmt.Errorf("control socket %s: %w (stop it first, or choose another -socket)", path, errDaemonRunning)
		}
		if err := os.Remove(path); err != nil {
			return nil, fmt.Errorf("control socket %s: removing stale socket: %w", path, err)
		}
	}
	old := syscall.Umask(0o077)
	l, err := net.ListenUnix("unixpacket", &net.UnixAddr{Name: path, Net: "unixpacket"})
	syscall.Umask(old)
	if err != nil {
		return nil, fmt.Errorf("control socket %s: %w", path, err)
	}
	// Close must not unlink: shutdown removes the file itself, only if it is
	// still ours.
	l.SetUnlinkOnClose(false)
	if gid >= 0 {
		if err := os.Chown(path, -1, gid); err != nil {
			l.Close()
			os.Remove(path)
			return nil, fmt.Errorf("control socket %s: chown to group %d: %w", path, gid, err)
		}
	}
	if err := os.Chmod(path, mode); err != nil {
		l.Close()
		os.Remove(path)
		return nil, fmt.Errorf("control socket %s: chmod: %w", path, err)
	}
	return l, nil
}
