package verbsd

import (
	"net/netip"

	"github.com/iwarpd/iwarpd/proto"
	"github.com/iwarpd/iwarpd/verbsd/rnic"
)

// transportQP is a QP's transport as the control side drives it: the
// engine's QPOps and what create-qp, modify-qp, query-qp and iwarpctl need.
type transportQP interface {
	rnic.QPOps
	// Core returns the core QP.
	Core() *rnic.QP
	// Install puts the QP on engine e (inside a command).
	Install(e *rnic.Engine) error
	// CheckModify refuses what the transport does not allow of modify-qp
	// (before anything changes); Modified applies what it keeps of a
	// transition that happened (a new Q_Key, RESET's new life).
	CheckModify(to proto.QPState, qkey uint32) error
	Modified(to proto.QPState, qkey uint32)
	// Addr is the local address the QP reports (UD/RD port, RC connection).
	Addr() netip.AddrPort
	// QKey is a datagram QP's Q_Key (0: none).
	QKey() uint32
	// Inspect adds the transport's per-QP figures to m (iwarpctl qps).
	Inspect(m map[string]int64)
}

// transportOf returns the transport of a core QP.
func transportOf(c *rnic.QP) transportQP { return c.Ops.(transportQP) }

// addrString is a QP's address as proto replies carry it ("" if none).
func addrString(t transportQP) string {
	if a := t.Addr(); a.IsValid() {
		return a.String()
	}
	return ""
}
