package proto

import "fmt"

// Connection management of RC queue pairs, in the manner of rdma_cm: a
// client listens (OpListen) and is told of connection requests by CM events
// (OpCMEvent, body CMEvent); it accepts one onto a QP (OpAccept) or rejects
// it (OpReject). The active side connects a QP (OpConnect); the outcome
// arrives as a CM event. OpDisconnect ends a connection gracefully or
// abortively. The daemon runs the MPA Request/Reply exchange (RFC 5044 §7.1,
// RFC 6581) itself; the client only sees private data, IRD/ORD and the
// outcome.

// ListenRequest opens a TCP listening socket owned by the session.
type ListenRequest struct {
	// Addr is "ip:port"; port 0 asks for an ephemeral port; an empty ip
	// (":port") means the device address.
	Addr string `json:"addr"`
	// Backlog bounds the connections of the listener that are in MPA
	// negotiation or wait for Accept/Reject (0: 16; at most 128).
	Backlog int `json:"backlog,omitempty"`
}

// ListenReply names the listener and the address it is bound to (with the
// actual port).
type ListenReply struct {
	Handle uint32 `json:"handle"`
	Addr   string `json:"addr"`
}

// AcceptRequest accepts connection request Conn (from a CMConnectRequest
// event) onto QP, which must be an RC QP in INIT. The daemon sends the MPA
// Reply carrying PrivateData and the IRD/ORD block (Rev 2), hands the
// connection to the QP and replies once it is established.
type AcceptRequest struct {
	Conn        uint32 `json:"conn"`
	QP          uint32 `json:"qp"`
	PrivateData []byte `json:"private_data,omitempty"`
	IRD         uint16 `json:"ird,omitempty"` // 0: the device default
	ORD         uint16 `json:"ord,omitempty"` // 0: the device default
}

// RejectRequest refuses connection request Conn: the daemon sends an MPA
// Reply with R=1 carrying PrivateData and closes the connection.
type RejectRequest struct {
	Conn        uint32 `json:"conn"`
	PrivateData []byte `json:"private_data,omitempty"`
}

// ConnectRequest starts connecting QP (RC, INIT) to Addr. The reply only
// says the attempt started; the outcome is a CM event for the QP:
// CMEstablished, CMRejected, CMUnreachable, CMTimedOut or
// CMConnectionError.
type ConnectRequest struct {
	QP          uint32     `json:"qp"`
	Addr        string     `json:"addr"` // ip:port of the listener
	PrivateData []byte     `json:"private_data,omitempty"`
	IRD         uint16     `json:"ird,omitempty"` // 0: the device default
	ORD         uint16     `json:"ord,omitempty"` // 0: the device default
	MPA         MPAOptions `json:"mpa"`
	// TimeoutMs bounds the TCP connect and the wait for the MPA Reply
	// (0: the device's MPA timeout).
	TimeoutMs uint32 `json:"timeout_ms,omitempty"`
	// LocalPort binds the connection's TCP socket to this port of the
	// device's address before connecting (0: a port the kernel picks); a
	// port the client could bind itself (libfabric: an active endpoint
	// opened on a passive endpoint's address, fi_endpoint(3) info->handle).
	LocalPort uint16 `json:"local_port,omitempty"`
}

// DisconnectRequest ends QP's connection: gracefully (finish what was
// posted, then TCP FIN) or, with Abort, at once with a Terminate. A QP
// still connecting has its attempt cancelled.
type DisconnectRequest struct {
	QP    uint32 `json:"qp"`
	Abort bool   `json:"abort,omitempty"`
}

// MPACRC is the CRC policy of an MPA exchange (mpa.CRCPolicy).
type MPACRC uint8

const (
	MPACRCDefault   MPACRC = iota // the device's policy
	MPACRCPreferred               // ask for CRC, accept a peer without
	MPACRCRequired                // ask for CRC, fail a peer that does not confirm it
	MPACRCOff                     // do not ask (still used when the peer asks, RFC 5044)
)

func (c MPACRC) String() string {
	switch c {
	case MPACRCDefault:
		return "default"
	case MPACRCPreferred:
		return "preferred"
	case MPACRCRequired:
		return "required"
	case MPACRCOff:
		return "off"
	}
	return fmt.Sprintf("crc(%d)", uint8(c))
}

// ParseMPACRC reads "preferred", "required" or "off".
func ParseMPACRC(s string) (MPACRC, error) {
	switch s {
	case "preferred":
		return MPACRCPreferred, nil
	case "required":
		return MPACRCRequired, nil
	case "off":
		return MPACRCOff, nil
	}
	return 0, fmt.Errorf("MPA CRC policy %q: want required, preferred or off", s)
}

// Toggle is an on/off option whose zero value means "the device default".
type Toggle uint8

const (
	ToggleDefault Toggle = iota
	ToggleOn
	ToggleOff
)

// Resolve returns the toggle's value, def when it is ToggleDefault.
func (t Toggle) Resolve(def bool) bool {
	switch t {
	case ToggleOn:
		return true
	case ToggleOff:
		return false
	}
	return def
}

// RTRSet is a set of RFC 6581 ready-to-receive message types (the values
// are those of mpa.RTRSet).
type RTRSet uint8

const (
	RTRSend  RTRSet = 1 << iota // zero-length Send
	RTRWrite                    // zero-length RDMA Write (STag 1, TO 0)
	RTRRead                     // zero-length RDMA Read
)

// MPAOptions are an initiator's wishes for one connection; every zero field
// means the device's policy (iwarpd -mpa-* flags).
type MPAOptions struct {
	Revision   uint8  `json:"revision,omitempty"` // 1 or 2
	CRC        MPACRC `json:"crc,omitempty"`
	Markers    Toggle `json:"markers,omitempty"`      // ask the peer for markers
	PeerToPeer Toggle `json:"peer_to_peer,omitempty"` // RFC 6581 peer-to-peer mode (Rev 2)
	RTR        RTRSet `json:"rtr,omitempty"`          // RTR types offered in peer-to-peer mode
}

// CMEventType is the kind of a CM event.
type CMEventType uint16

const (
	// CMConnectRequest: a listener received a valid MPA Request; Conn names
	// it for Accept/Reject; PrivateData and IRD/ORD are the initiator's.
	CMConnectRequest CMEventType = iota + 1
	// CMEstablished: the QP is connected (RTS); PrivateData is the peer's
	// (the Reply's on the active side); IRD/ORD are the values in force.
	CMEstablished
	// CMRejected: the responder rejected (R=1); PrivateData is its reason.
	CMRejected
	// CMUnreachable: TCP connect failed (Status ECONNREFUSED, EHOSTUNREACH,
	// ENETUNREACH...).
	CMUnreachable
	// CMTimedOut: no TCP connection or no MPA Reply in time (ETIMEDOUT).
	CMTimedOut
	// CMDisconnected: an established connection ended; Status 0 for a
	// graceful close, else why (Detail names a Terminate).
	CMDisconnected
	// CMConnectionError: MPA negotiation failed (Status EPROTO, Detail the
	// reason; a TERMINATE was sent where the RFC asks for one).
	CMConnectionError
)

var cmEventNames = [...]string{
	CMConnectRequest: "connect-request", CMEstablished: "established", CMRejected: "rejected",
	CMUnreachable: "unreachable", CMTimedOut: "timed-out", CMDisconnected: "disconnected",
	CMConnectionError: "connection-error",
}

func (t CMEventType) String() string {
	if t > 0 && int(t) < len(cmEventNames) {
		return cmEventNames[t]
	}
	return fmt.Sprintf("cm-event(%d)", uint16(t))
}

// CMEvent is the body of OpCMEvent messages.
type CMEvent struct {
	Type     CMEventType `json:"type"`
	Listener uint32      `json:"listener,omitempty"`
	Conn     uint32      `json:"conn,omitempty"` // daemon-side connection request id
	QP       uint32      `json:"qp,omitempty"`
	Peer     string      `json:"peer,omitempty"`  // ip:port
	Local    string      `json:"local,omitempty"` // ip:port
	// PrivateData is the peer's ULP private data (the RFC 6581 IRD/ORD
	// block removed).
	PrivateData []byte `json:"private_data,omitempty"`
	IRD         uint16 `json:"ird,omitempty"`
	ORD         uint16 `json:"ord,omitempty"`
	Status      int    `json:"status,omitempty"` // an errno, 0 for success
	Detail      string `json:"detail,omitempty"`
	// MPA is what was negotiated (CMEstablished).
	MPA *MPAParams `json:"mpa,omitempty"`
}

// MPAParams is the outcome of an MPA exchange, from the QP's side.
type MPAParams struct {
	Revision   uint8  `json:"revision"`
	Enhanced   bool   `json:"enhanced,omitempty"` // RFC 6581 IRD/ORD block exchanged
	CRC        bool   `json:"crc,omitempty"`
	MarkersTx  bool   `json:"markers_tx,omitempty"`
	MarkersRx  bool   `json:"markers_rx,omitempty"`
	PeerToPeer bool   `json:"peer_to_peer,omitempty"`
	RTR        RTRSet `json:"rtr,omitempty"` // the one negotiated type
	PeerIRD    uint16 `json:"peer_ird,omitempty"`
	PeerORD    uint16 `json:"peer_ord,omitempty"`
}
