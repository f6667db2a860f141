// Package rc is the RC transport of iwarpd's software RNIC: reliable
// connected queue pairs over TCP with MPA framing (RFC 5044, with RFC 6581's
// peer-to-peer mode), DDP (RFC 5041) and RDMAP (RFC 5040), with RFC 7306's
// atomics and immediate data, and the rdma-cm style connection manager that
// negotiates MPA and hands the socket to the engine.
//
// A QP (qp.go) is a core rnic.QP and its connection (conn.go: state,
// queues, closing), served by the engine through rnic.QPOps: the transmit
// path (tx.go, txbatch.go, txcopy.go) frames work requests into FPDUs and
// batches them into writev; the receive path (rx.go) reads FPDUs, checks
// their CRC and headers and places them (tagged: straight into registered
// memory; untagged: into posted receives); Read Responses and atomics are
// answered from the IRD queue (atomic.go), immediate data in imm.go;
// Terminate in term.go, why a connection ended in log.go.
//
// The connection manager (cm*.go) runs on its own goroutines per session
// (CM: listeners, pending requests, connects) and touches engine state only
// through rnic.Engine.Do.
package rc
