// Package shm is the shared memory under iwarpd's data path: sealed memfd
// regions (created by a client, mapped by the daemon) and the
// single-producer single-consumer rings of package proto laid over them.
//
// A region is sealed against shrinking before its descriptor leaves the
// process that made it, and the mapping side checks the seal: otherwise a
// client could truncate memory the daemon has mapped and make it fault
// (SIGBUS). Everything read from a region the other side can write is
// untrusted: ring indices are checked on every read.
//
// Imports: the standard library, golang.org/x/sys, proto.
package shm
