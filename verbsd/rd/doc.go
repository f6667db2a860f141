// Package rd is the RD transport of iwarpd's software RNIC (docs/rd.md,
// ../shared/datagram-iwarp.md): reliable datagram queue pairs, a UD datagram
// QP (package ud: socket, segmentation, Write-Record) made reliable by the
// pure state machine of llp/rd, one rd.Endpoint per QP, with per-peer
// sequence numbers, cumulative and selective acknowledgements,
// retransmission, a bounded reorder store and RDMA Read and atomics over
// datagrams with an IRD/ORD and a replay cache.
//
// A QP (qp.go) is a ud.QP and its RD state (state.go), served by the
// engine through rnic.QPOps: send.go builds DATA datagrams from work
// requests (and rebuilds them from their tokens on retransmission), recv.go
// orders, places and acknowledges what arrives, atomic.go answers atomics,
// linger.go keeps a destroyed QP's port acknowledging its peers'
// retransmissions for -rd-linger (Engine: the per-engine reorder budget and
// lingering ports).
package rd
