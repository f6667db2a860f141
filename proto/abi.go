package proto

import "fmt"

// ABIVersion is the version of both the control protocol and the
// shared-memory layout. Any change to either bumps it; a client and a daemon
// must agree exactly.
//
// Version 2: an address handle is the client's alone; its address vector
// travels in every datagram SQE (AddressVector), and the create-ah and
// destroy-ah requests and the max_ah limit are gone.
//
// Version 3: RFC 7306 (SQE Imm at 16..19, atomic opcodes with their operands
// in the SQE body, CQE Imm and WCFlagImm, atomic device and QP attributes);
// the datagram Q_Key (SQE QKey at 56..59, qkey in create/modify/query-qp);
// memory regions in the client's own address space (RegMRRequest.Process);
// one doorbell eventfd per session.
//
// Version 4: process memory is reached through the client's own
// /proc/self/mem, handed over at Hello (HelloRequest.ProcessMem, descriptor
// 0), no longer through the pid of the connecting process.
//
// Version 5: a UD or RD QP's UDP socket may be the client's own
// (docs/design-small-messages.md "Security: a socket in the client's
// hands"): OpReservePort assigns the port, CreateQPRequest.Socket says
// descriptor 1 is the socket the client bound to it, and
// HelloReply.NetnsCookie tells the client whether it shares the daemon's
// network namespace (only then can it make the socket). OpFastpathPage
// hands a UD QP's fast-path page (fastpath.go): the client then reads its
// own socket while it owns it.
const ABIVersion = 5

// Magic opens every control message header ("IWRP" little-endian).
const Magic uint32 = 0x50525749

// MaxMessage is the largest control message, header and body.
const MaxMessage = 64 << 10

// MaxFDs is the most file descriptors one control message may carry.
const MaxFDs = 4

// VersionError reports an ABI version mismatch, on whichever side sees it.
type VersionError struct {
	Local, Peer uint16
	Side        string // "client" or "daemon": who detected it
}

func (e *VersionError) Error() string {
	return fmt.Sprintf("proto: ABI version mismatch: this %s speaks version %d, the peer speaks %d; run a client and a daemon from the same release",
		e.Side, e.Local, e.Peer)
}
