// Package proto is the contract between ofverbs (the client library) and
// verbsd (the daemon): the control protocol spoken over the daemon's Unix
// socket, and the shared-memory ABI of the work and completion queues. The
// two sides are different processes and meet only here.
//
// Control plane (control.go, messages.go): SOCK_SEQPACKET messages, each a
// 16-octet little-endian header (magic, ABI version, op, sequence number,
// status) and a JSON body; file descriptors (memfd regions, eventfds) travel
// beside a message as SCM_RIGHTS. The first exchange is Hello; a client and a
// daemon of different ABI versions get a clear error on both sides. Hello
// also carries the client's own /proc/self/mem (HelloRequest.ProcessMem):
// the address space every process-memory region of the session names, the
// one of the process that said Hello, reachable only while it exists.
// Since ABI 5 a UD or RD QP's UDP socket may be the client's own: the
// client asks OpReservePort for the port, binds a socket of its own to the
// address the daemon answers and passes it as descriptor 1 of OpCreateQP
// (CreateQPRequest.Socket); the daemon checks it before it adopts it
// (docs/security.md "Client-made QP sockets"). A create-qp without a
// socket gets one the daemon makes, as before.
//
// Data plane (queue.go): fixed-size little-endian queue entries (SQE, RQE,
// CQE) in single-producer single-consumer rings inside sealed memfd regions,
// with free-running 32-bit producer/consumer indices on their own cache
// lines, a CQ arming word for completion events, and the daemon's status page
// whose "asleep" word tells a client when to ring the doorbell (eventfd).
// Size assertions and golden-bytes tests pin the layout.
//
// Everything a daemon reads from shared memory is untrusted: proto only
// defines layouts; validation is the reader's job.
//
// Imports: the standard library and golang.org/x/sys only.
package proto
