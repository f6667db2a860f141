// Package proto is the contract between ofverbs (client) and verbsd
// (daemon): versioned control messages over the Unix socket, and the
// shared-memory ABI (queue entries, ring headers, doorbell words).
//
// Imports: the standard library and golang.org/x/sys only.
package proto
