// Package verbsdtest is a small raw client of the daemon for tests: the
// control protocol on proto.Conn and the shared-memory rings of
// internal/shm, with none of ofverbs' conveniences (and none of its
// checks, so tests can send whatever they like).
//
// Imports: proto, internal/shm, golang.org/x/sys.
package verbsdtest
