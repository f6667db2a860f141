package sockdir

import (
	"fmt"
	"io/fs"
	"net"
	"os"
	"slices"

	"golang.org/x/sys/unix"
)

// Check verifies that dir may hold a control socket for uid (see the
// package comment); a directory owned by one of also is accepted too.
func Check(dir string, uid int, also ...int) error {
	var st unix.Stat_t
	if err := unix.Lstat(dir, &st); err != nil {
		return fmt.Errorf("socket directory %s: %w", dir, err)
	}
	if err := judge(dir, &st, uid, also); err != nil {
		return err
	}
	if st.Mode&unix.S_IFMT == unix.S_IFLNK {
		if err := unix.Stat(dir, &st); err != nil {
			return fmt.Errorf("socket directory %s: %w", dir, err)
		}
		if err := judge(dir+" (its target)", &st, uid, also); err != nil {
			return err
		}
	}
	if st.Mode&unix.S_IFMT != unix.S_IFDIR {
		return fmt.Errorf("socket directory %s is not a directory", dir)
	}
	return nil
}

func judge(dir string, st *unix.Stat_t, uid int, also []int) error {
	if int(st.Uid) != uid && st.Uid != 0 && !slices.Contains(also, int(st.Uid)) {
		return fmt.Errorf("socket directory %s belongs to uid %d, not to uid %d or root: another user may have created it to impersonate iwarpd; remove it or choose another socket path", dir, st.Uid, uid)
	}
	if st.Mode&unix.S_IFMT == unix.S_IFLNK {
		return nil // a link's own permission bits mean nothing
	}
	if st.Mode&(unix.S_IWGRP|unix.S_IWOTH) != 0 && st.Mode&unix.S_ISVTX == 0 {
		return fmt.Errorf("socket directory %s is writable by others (mode %v): anyone could replace the socket; chmod go-w it or choose another socket path", dir, fs.FileMode(st.Mode&0o777))
	}
	return nil
}

// PeerUID returns the uid of the process at the other end of a Unix
// socket connection (SO_PEERCRED, taken when it connected or listened).
func PeerUID(uc *net.UnixConn) (int, error) {
	raw, err := uc.SyscallConn()
	if err != nil {
		return -1, err
	}
	var cred *unix.Ucred
	var cerr error
	if err := raw.Control(func(fd uintptr) {
		cred, cerr = unix.GetsockoptUcred(int(fd), unix.SOL_SOCKET, unix.SO_PEERCRED)
	}); err != nil {
		return -1, err
	}
	if cerr != nil {
		return -1, fmt.Errorf("SO_PEERCRED: %w", cerr)
	}
	return int(cred.Uid), nil
}

// TrustedPeer reports whether a daemon running as peer may be given a
// client's memory: root, the client's own uid, or one of also.
func TrustedPeer(peer int, also ...int) bool {
	if peer == 0 || peer == os.Geteuid() {
		return true
	}
	for _, u := range also {
		if u >= 0 && peer == u {
			return true
		}
	}
	return false
}
