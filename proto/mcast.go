package proto

// McastRequest is the body of OpAttachMcast and OpDetachMcast: the UD QP
// (a handle of the session) and the IPv4 multicast group, "a.b.c.d:port".
// Attaching makes the daemon receive the group's datagrams on port at that
// QP (IP_ADD_MEMBERSHIP on the device's multicast interface); detaching
// stops it. A QP may be attached to several groups; attaching twice to the
// same group is EEXIST, detaching a group not attached ENOENT. Both reply
// with an empty body.
type McastRequest struct {
	QP    uint32 `json:"qp"`
	Group string `json:"group"`
}
