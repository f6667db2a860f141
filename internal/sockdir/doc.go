// Package sockdir decides whether a directory may hold iwarpd's control
// socket, and whether the process at the other end of a control connection
// may be trusted with a client's memory (issue 13, point 6).
//
// Without XDG_RUNTIME_DIR both the daemon and its clients use
// $TMPDIR/iwarpd-UID/, a name any local user can create first: an
// impostor's daemon then received its victims' memfds. So
//   - the daemon and clients accept a socket directory only if it is owned
//     by the user or by root and no one else can write to it (group/other
//     write permission is refused, except on a sticky directory owned by
//     root or the user, such as /tmp itself, where others cannot remove or
//     rename what is not theirs); a symbolic link is judged as itself and
//     as its target;
//   - a client talks to a daemon only if its SO_PEERCRED uid (socket(7),
//     unix(7)) is root's, its own, or one it was told to trust.
//
// Imports: the standard library and golang.org/x/sys only.
package sockdir
