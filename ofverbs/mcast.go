package ofverbs

import (
	"net/netip"

	"github.com/iwarpd/iwarpd/proto"
	"golang.org/x/sys/unix"
)

// AttachMcast attaches a UD QP to an IPv4 multicast group (like
// ibv_attach_mcast): from then on, datagrams sent to group (an address
// handle made with CreateAH(group)) on any host of the network reach this
// QP. The group's port is the UDP port the members listen on; a QP may be
// attached to several groups. The daemon joins the group on its multicast
// interface (iwarpd -mcast-if). Attaching twice to one group gives an error
// wrapping unix.EEXIST; a group that is not IPv4 multicast or has port 0
// one wrapping unix.EINVAL.
func (q *QP) AttachMcast(group netip.AddrPort) error {
	return q.mcast(proto.OpAttachMcast, "attach-mcast", group)
}

// DetachMcast detaches the QP from group: it receives nothing sent to the
// group any more. A group it is not attached to gives an error wrapping
// unix.ENOENT. Destroying the QP detaches it from every group.
func (q *QP) DetachMcast(group netip.AddrPort) error {
	return q.mcast(proto.OpDetachMcast, "detach-mcast", group)
}

func (q *QP) mcast(op proto.Op, name string, group netip.AddrPort) error {
	if q.closed.Load() {
		return closedError(name, "queue pair")
	}
	if !group.IsValid() || !group.Addr().Unmap().Is4() || !group.Addr().IsMulticast() || group.Port() == 0 {
		return newError(name, unix.EINVAL, "%v is not an IPv4 multicast group address with a port", group)
	}
	return q.ctx.call(op, proto.McastRequest{QP: q.handle, Group: group.String()}, nil)
}
