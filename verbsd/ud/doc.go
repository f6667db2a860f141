// Package ud is the UD transport of iwarpd's software RNIC and the datagram
// machinery RD builds on: the datagram profile of docs/wire-format.md and
// ../shared/datagram-iwarp.md over one non-blocking UDP socket per QP.
//
// A QP (qp.go) is a core rnic.QP with its socket, Q_Key, reassembly of
// multi-datagram messages (ud/reassembly.go), Write-Record records being
// received (wrec_*.go), multicast groups (ud/mcast.go) and receive backlog
// (backlog.go), served by the engine through rnic.QPOps. Sends (send.go)
// segment work requests into DDP segments with a CRC32c trailer and leave in
// sendmmsg batches with UDP GSO (ud/batch.go, ud/udpio_linux.go); receives
// (recv.go) read recvmmsg batches with UDP GRO and scatter single-datagram
// messages straight into posted buffers. Engine (qp.go) is the per-engine
// scratch every datagram QP of an engine reuses, UD's and RD's alike.
//
// Datagram ports are bound on behalf of clients within the configured
// ranges (rnic/bind.go, rnic.CheckClientPort's rules).
package ud
