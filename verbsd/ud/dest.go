package ud

import (
	"net/netip"

	"github.com/iwarpd/iwarpd/proto"
	"github.com/iwarpd/iwarpd/verbsd/rnic"
)

// Destinations of datagram work requests (ABI 2). An address handle is the
// client's alone, as mlx5's UD address vector is: the client copies the
// destination into every SQE (proto.AddressVector, SQE octets 36..55) and
// the engine reads and validates it here, per work request. The daemon
// keeps no per-destination record, so a peer costs it nothing until it
// sends (RD keeps its reliability state per peer, llp/rd).
//
// A group destination (docs/multicast.md) is an IPv4 multicast address in
// the vector: the engine tells it from a unicast one by the address alone.

// Destination returns the destination of a datagram SQE: its address
// vector decoded and checked (known family, no flags, port not zero, the
// address of the family of the device address, which is the family of
// every datagram socket: BindDgram) and a remote Q_Key (SQE.QKey, not 0).
// A bad vector or a missing key is WCLocQPOpErr, the
// class an unknown address handle number had under ABI 1; the caller
// completes that work request with it and the QP goes on (ud/send.go,
// rd/send.go).
func (e *Engine) Destination(sqe *proto.SQE) (netip.AddrPort, proto.WCStatus) {
	dst, err := sqe.AH.AddrPort()
	if err != nil || dst.Addr().Is4() != e.Cfg.Addr.Is4() || sqe.QKey == 0 { // Q_Key 0 names no QP (rnic/keys.go)
		return netip.AddrPort{}, proto.WCLocQPOpErr
	}
	return dst, proto.WCSuccess
}

// dropSend completes the head work request of q's send queue with status,
// without sending anything, and leaves q as it is: a work request that
// names a bad destination harms no other (a datagram QP serves many peers).
func (e *Engine) dropSend(q *QP, wrid uint64, status proto.WCStatus) {
	e.count(q, rnic.CWRErrors, 1)
	q.sendSeg = 0
	q.SQ.Advance()
	q.SQ.Release()
	e.PostCQE(q.Session, q.SendCQ, &proto.CQE{WRID: wrid, Status: status, Opcode: proto.WCSend, QPN: q.QPN})
}
