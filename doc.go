// Package iwarpd is the root of a user-space iWARP RDMA stack: a daemon per
// node (cmd/iwarpd) that is a software RNIC, speaking RDMAP/DDP/MPA over TCP
// for RC queue pairs (RFC 5040, 5041, 5044, 6581) and the datagram-iWARP
// profile over UDP for UD and RD queue pairs, and a Go verbs library
// (ofverbs) that programs link.
//
// This package holds no code: its tests enforce the project's layering rules
// (see layout_test.go and docs/architecture.md) and formatting.
package iwarpd
