// Command rping is rdma-core's rping on iwarpd: an RDMA ping-pong over one
// RC queue pair, wire-compatible with rping (librdmacm/examples/rping.c), so
// either side may be the real rping over Linux siw.
//
//	server:  rping -s [-vVd] [-S size] [-a addr] [-p port]
//	client:  rping -c [-vVd] [-S size] [-C count] -a addr [-p port]
//
// Each ping: the client fills its start buffer with "rdma-ping-N: ABC...",
// sends its (address, STag, size) in a Send; the server RDMA Reads it and
// answers with a "go ahead" Send; the client sends its sink buffer's
// (address, STag, size); the server RDMA Writes what it read there and
// sends another "go ahead"; the client compares (-V) and prints (-v).
// Exit status 0 on success, 1 on any failure, 2 on a usage error. See
// docs/rping.md.
//
// It may import ofverbs and proto (and golang.org/x/sys), nothing of the
// daemon: it is what an application of iwarpd looks like.
package main
