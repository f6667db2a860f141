// Package ofverbs is the client side of iwarpd: OpenFabrics-style verbs
// (device, PD, MR, CQ, completion channel, QP, AH, SRQ, connection manager)
// for Go programs. Control goes to the daemon over its Unix socket; work
// queues, completion queues and registered buffers live in shared memory.
//
// Imports: proto and golang.org/x/sys only; never verbsd or protocol code.
package ofverbs
