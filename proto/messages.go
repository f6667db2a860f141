package proto

// Control message bodies. Handles are per-session numbers chosen by the
// daemon; a handle of one session means nothing in another. Every request
// that needs descriptors says which ones, in order.

// HelloRequest opens a session. The daemon answers with HelloReply and two
// descriptors: its doorbell eventfd (write 8 bytes to wake the engine) and
// its status page memfd (map read-only: StatusPage layout).
type HelloRequest struct {
	ABI    uint16 `json:"abi"`
	Client string `json:"client,omitempty"` // program name, for iwarpctl
	// Inspect opens a read-only session for iwarpctl: only OpInspect and
	// OpQueryDevice are served, and no descriptors are returned.
	Inspect bool `json:"inspect,omitempty"`
	// ProcessMem says descriptor 0 is the client's own /proc/self/mem,
	// opened O_RDWR|O_CLOEXEC by the client itself: the address space every
	// process-memory MR of the session (RegMRRequest.Process) refers to —
	// the one of the process that said Hello, whichever process later
	// sends a registration on the socket, and only as long as that address
	// space exists (after an exec or exit the daemon reaches nothing). The
	// kernel checked at the open that the client may access it; the
	// daemon needs no privilege of its own. Without it the session may
	// not register process memory. See docs/memory-registration.md.
	ProcessMem bool `json:"process_mem,omitempty"`
}

type HelloReply struct {
	ABI       uint16 `json:"abi"`
	Daemon    string `json:"daemon"` // daemon version string
	SessionID uint64 `json:"session"`
	Device    string `json:"device"`
	// Addr is the device's IP address: its family is the family of every
	// datagram QP's socket, which a client's address handles must match.
	Addr string `json:"addr"`
	// NetnsCookie is SO_NETNS_COOKIE (socket(7), Linux 5.14) of the
	// daemon's network namespace; 0 when the kernel does not say. A
	// client makes its datagram QPs' sockets itself (ReservePortRequest)
	// only when its own sockets carry the same cookie: a socket of
	// another namespace would be refused.
	NetnsCookie uint64 `json:"netns_cookie,omitempty"`
}

// DeviceAttr is what QueryDevice reports: every limit the daemon enforces.
type DeviceAttr struct {
	Name           string `json:"name"`
	MaxQP          int    `json:"max_qp"`
	MaxQPWR        int    `json:"max_qp_wr"`
	MaxSGE         int    `json:"max_sge"`
	MaxCQ          int    `json:"max_cq"`
	MaxCQE         int    `json:"max_cqe"`
	MaxMR          int    `json:"max_mr"`
	MaxMRSize      uint64 `json:"max_mr_size"`
	MaxRegistered  uint64 `json:"max_registered_bytes"` // per session
	MaxPD          int    `json:"max_pd"`
	MaxSRQ         int    `json:"max_srq"`
	MaxSRQWR       int    `json:"max_srq_wr"`
	MaxInline      int    `json:"max_inline"`
	MaxMsgUD       int    `json:"max_msg_ud"` // largest UD message (segmented by DDP)
	DatagramSize   int    `json:"datagram_size"`
	MaxCompChannel int    `json:"max_comp_channel"`
	// AtomicCap says how remote atomics (RFC 7306 FetchAdd, CmpSwap) are
	// atomic, as ibv_device_attr.atomic_cap: AtomicGlob (against every
	// other atomic and the owning process's CPU atomics on the same 8
	// octets). MaxQPRdAtom / MaxQPInitRdAtom bound the Reads and atomics a
	// QP answers (IRD) / has outstanding (ORD), as max_qp_rd_atom and
	// max_qp_init_rd_atom.
	AtomicCap       AtomicCap `json:"atomic_cap"`
	MaxQPRdAtom     int       `json:"max_qp_rd_atom,omitempty"`
	MaxQPInitRdAtom int       `json:"max_qp_init_rd_atom,omitempty"`
}

// AtomicCap is a device's atomicity guarantee (enum ibv_atomic_cap).
type AtomicCap uint8

const (
	AtomicNone AtomicCap = 0 // no remote atomics
	AtomicHCA  AtomicCap = 1 // atomic against other remote atomics only
	AtomicGlob AtomicCap = 2 // atomic against remote atomics and CPU atomics
)

// PortAttr is what QueryPort reports.
type PortAttr struct {
	State        string `json:"state"` // "active"
	Addr         string `json:"addr"`  // IP address the device serves
	DatagramSize int    `json:"datagram_size"`
	UDPorts      string `json:"ud_ports"` // "first-last"
	// UnprivPortStart is the kernel's net.ipv4.ip_unprivileged_port_start
	// (ip(7)) as the daemon applies it: an explicit port below it is
	// refused (EACCES) to a session that is not PrivBind (rnic/bind.go).
	UnprivPortStart uint16 `json:"unpriv_port_start,omitempty"`
	// PrivBind: this session (its client, by SO_PEERCRED) may have ports
	// below UnprivPortStart (uid 0 or CAP_NET_BIND_SERVICE).
	PrivBind bool `json:"priv_bind,omitempty"`
}

type Handle struct {
	Handle uint32 `json:"handle"`
}

// RegMRRequest registers memory of the client for PD, in one of two forms:
//
//   - memfd (Process false): [Offset, Offset+Length) of a sealed memfd
//     region (descriptor 0) that the client has mapped at Addr. The region
//     must be a plain (not hugetlb) memfd sealed against shrinking and
//     growing (F_SEAL_SHRINK|F_SEAL_GROW), so that the daemon can never be
//     made to fault on it. The daemon maps it: the zero-copy fast path.
//   - process memory (Process true): no descriptor; [Addr, Addr+Length)
//     lies in the address space the session's /proc/self/mem names (the
//     process that said Hello: HelloRequest.ProcessMem), Offset must be 0.
//     The daemon reaches it with pread/pwrite(2) on that descriptor (copies
//     through its own staging, on a goroutine of the session with a
//     bound), so any heap, stack or static range can be registered. Memory
//     unmapped while registered fails the operations touching it with an
//     access error. See docs/memory-registration.md.
type RegMRRequest struct {
	PD      uint32 `json:"pd"`
	Offset  uint64 `json:"offset"`
	Length  uint64 `json:"length"`
	Addr    uint64 `json:"addr"`
	Access  Access `json:"access"`
	Process bool   `json:"process,omitempty"`
}

type RegMRReply struct {
	Handle uint32 `json:"handle"`
	LKey   uint32 `json:"lkey"`
	RKey   uint32 `json:"rkey"`
}

// CreateCompChannelRequest passes descriptor 0: an eventfd the daemon writes
// to when an armed CQ bound to the channel gets a completion.
type CreateCompChannelRequest struct{}

// CreateCQRequest passes descriptor 0: a sealed memfd holding the CQ ring
// (RingBytes(Depth, CQESize) bytes, RingHeader at offset 0).
type CreateCQRequest struct {
	Depth   uint32 `json:"depth"` // power of two
	Channel uint32 `json:"channel,omitempty"`
}

// QPCaps are a QP's queue sizes.
type QPCaps struct {
	MaxSendWR  uint32 `json:"max_send_wr"` // SQ depth, power of two
	MaxRecvWR  uint32 `json:"max_recv_wr"` // RQ depth, power of two (0 with an SRQ)
	MaxSendSGE uint32 `json:"max_send_sge"`
	MaxRecvSGE uint32 `json:"max_recv_sge"`
	MaxInline  uint32 `json:"max_inline"`
	// MaxRdAtomic / MaxDestRdAtomic: RDMA Reads and atomics outstanding
	// as requester (ORD) / answered at a time as responder (IRD) on an RD
	// QP (0: the daemon's -rd-ord / -rd-ird); an RC QP takes them from
	// the connection's IRD/ORD (Connect/Accept), as max_rd_atomic and
	// max_dest_rd_atomic.
	MaxRdAtomic     uint32 `json:"max_rd_atomic,omitempty"`
	MaxDestRdAtomic uint32 `json:"max_dest_rd_atomic,omitempty"`
}

// CreateQPRequest passes descriptor 0: a sealed memfd holding the SQ ring
// followed (at RingBytes(SQ)) by the RQ ring when no SRQ is used. Strides are
// SQEStride(MaxSendSGE, MaxInline) and RQEStride(MaxRecvSGE).
type CreateQPRequest struct {
	PD     uint32 `json:"pd"`
	Type   QPType `json:"type"`
	SendCQ uint32 `json:"send_cq"`
	RecvCQ uint32 `json:"recv_cq"`
	SRQ    uint32 `json:"srq,omitempty"`
	Caps   QPCaps `json:"caps"`
	SigAll bool   `json:"sig_all,omitempty"`
	// Port asks for a UDP port for a datagram QP (0: any in the daemon's range).
	Port uint16 `json:"port,omitempty"`
	// NoCRC turns datagram CRC checking off (agreed out of band with peers).
	NoCRC bool `json:"no_crc,omitempty"`
	// QKey is a datagram QP's Q_Key (docs/wire-format.md §5.1): every
	// datagram it accepts must name it. 0: the daemon draws a random
	// non-zero one (returned in the reply), which peers learn with the
	// QP's address.
	QKey uint32 `json:"qkey,omitempty"`
	// MergeSendImm (RC only) merges a Send with Immediate into one
	// receive (docs/atomics.md "Send with Immediate, merged"): the QP sends
	// the RFC 7306 Immediate Data message first, marked in its octets 4–7
	// (rdmap.ImmediateMergeTag), then the Send; and a marked Immediate
	// Data it receives consumes no receive but completes with the next
	// Send. Both ends must set it (the libfabric provider does on every
	// FI_EP_MSG endpoint). false: RFC 7306 as is (a Send, then an
	// Immediate Data message that takes its own receive).
	MergeSendImm bool `json:"merge_send_imm,omitempty"`
	// HoldRecv (RC only): an untagged message (a Send, or an Immediate
	// Data that takes a receive) that arrives while no receive is posted
	// is kept by the receiving daemon, in a bounded queue per QP, and
	// completes, in MSN order, the receives posted next (docs/iwarpd.md
	// "RC receive hold"; libfabric's FI_RM_ENABLED: iWARP has no
	// receiver-not-ready retry). Past the daemon's bound (-rc-hold-msgs,
	// -rc-hold-bytes, -user-max-held-bytes) the QP is terminated as
	// without it. The wire does not change; only the receiving side's
	// option matters. false: RFC 5040 as is (Terminate "invalid MSN, no
	// buffer").
	HoldRecv bool `json:"hold_recv,omitempty"`
	// Socket (UD, RD; ABI 5): descriptor 1 is the QP's UDP socket, made
	// by the client and bound to the port reserved for it
	// (ReservePortRequest; Port names it). The daemon checks it
	// (docs/security.md "Client-made QP sockets": UDP of the device's
	// family, bound to the device address and that port, not connected,
	// SO_REUSEADDR and SO_REUSEPORT off, the daemon's network namespace)
	// and uses it as the QP's own. false: the daemon makes the socket, as
	// before ABI 5.
	Socket bool `json:"socket,omitempty"`
	// QuietRecords (RD only): a Write-Record (opcode 0xC) the QP receives
	// is placed and acknowledged as usual but consumes no receive and
	// completes nothing at this end: RD needs no posted receive for its
	// last segment (no NOTREADY) and the record is counted
	// (wrec_complete) only. For a client that never reads the records
	// (the libfabric provider's RDM endpoints: fi_write without
	// FI_REMOTE_CQ_DATA has no target completion, fi_rma(3); FI_RMA_EVENT
	// is not offered). A Write-Record with Immediate (0xD) still takes one.
	// Only the receiving side's option matters; the wire does not change
	// (docs/write-record.md "Quiet records").
	QuietRecords bool `json:"quiet_records,omitempty"`
}

// ReservePortRequest (OpReservePort, ABI 5) asks the daemon for the port
// of a UD or RD QP whose UDP socket the client makes itself
// (docs/design-small-messages.md "Security: a socket in the client's
// hands"). Port 0 takes the next free port of the type's range
// (-ud-ports, -rd-ports), a named port is checked as create-qp checks it
// (rnic/bind.go); either way a lingering RD port is taken over as for a
// new QP (docs/rd.md). The daemon holds no socket on the port: it keeps
// it from its other clients until this session's create-qp takes it, the
// session ends, or the session has reserved MaxReservations more. The
// client then binds a UDP socket of the device's family to Addr and
// passes it as descriptor 1 of create-qp with Socket set and Port the
// reserved port.
type ReservePortRequest struct {
	Type QPType `json:"type"`
	Port uint16 `json:"port,omitempty"`
}

type ReservePortReply struct {
	Addr string `json:"addr"` // ip:port to bind
}

// MaxReservations is how many reserved ports a session keeps: reserving
// one more forgets its oldest.
const MaxReservations = 8

type CreateQPReply struct {
	Handle uint32 `json:"handle"`
	QPN    uint32 `json:"qpn"`
	Addr   string `json:"addr"`           // ip:port of a datagram QP
	QKey   uint32 `json:"qkey,omitempty"` // a datagram QP's Q_Key
}

// ModifyQPRequest moves a QP to State (RESET→INIT→RTR→RTS, any→ERROR).
// A non-zero QKey also sets a datagram QP's Q_Key (as IBV_QP_QKEY), in any
// transition.
type ModifyQPRequest struct {
	QP    uint32  `json:"qp"`
	State QPState `json:"state"`
	QKey  uint32  `json:"qkey,omitempty"`
}

type QueryQPReply struct {
	Type  QPType  `json:"type"`
	State QPState `json:"state"`
	QPN   uint32  `json:"qpn"`
	Addr  string  `json:"addr"`
	Caps  QPCaps  `json:"caps"`
	QKey  uint32  `json:"qkey,omitempty"`
}

// CreateSRQRequest passes descriptor 0: a sealed memfd holding the SRQ ring
// (stride RQEStride(MaxSGE)).
type CreateSRQRequest struct {
	PD     uint32 `json:"pd"`
	MaxWR  uint32 `json:"max_wr"` // power of two
	MaxSGE uint32 `json:"max_sge"`
	Limit  uint32 `json:"limit,omitempty"`
}

// Event is an asynchronous event (OpEvent).
type Event struct {
	Type   EventType `json:"type"`
	Handle uint32    `json:"handle"` // the QP, CQ or SRQ concerned
	Detail string    `json:"detail,omitempty"`
}

// InspectRequest is the optional body of OpInspect: which page of the
// daemon's state to return. A request without a body asks for the first
// page (Cursor zero), so an old client still gets a valid reply, with
// More set when the state did not fit.
type InspectRequest struct {
	Cursor InspectCursor `json:"cursor"`
}

// InspectCursor says where a page of Inspect starts: at session Session
// (the lowest session ID not below it), and within that session at the
// first MR, CQ or QP whose handle is not below Handle. Handles are unique
// within a session across object kinds, so one number suffices. The zero
// cursor is the start.
type InspectCursor struct {
	Session uint64 `json:"session"`
	Handle  uint32 `json:"handle"`
}

// Inspect is the daemon's state for iwarpctl, one page of it. Every page
// carries Daemon, PID, Device, Port and Counters whole; Sessions holds the
// page's share of the sessions, in ID order. A session split across pages
// appears on each with the same ID and scalar fields, and with a disjoint
// part of its MRs, CQs and QPs (objects in handle order): a client merges
// the pages by appending those lists. When More is set, Next is the cursor
// of the following page. A page never exceeds MaxMessage.
type Inspect struct {
	Daemon   string           `json:"daemon"`
	PID      int              `json:"pid"`
	Device   DeviceAttr       `json:"device"`
	Port     PortAttr         `json:"port"`
	Sessions []SessionInfo    `json:"sessions"`
	Counters map[string]int64 `json:"counters"`
	// Engines are the daemon's engines (docs/engines.md): one entry each.
	Engines []EngineInfo   `json:"engines,omitempty"`
	More    bool           `json:"more,omitempty"`
	Next    *InspectCursor `json:"next,omitempty"`
}

type SessionInfo struct {
	ID       uint64   `json:"id"`
	PID      int32    `json:"pid"`
	UID      uint32   `json:"uid"`
	GID      uint32   `json:"gid"`
	Client   string   `json:"client,omitempty"`
	PDs      int      `json:"pds"`
	MRs      []MRInfo `json:"mrs"`
	CQs      []CQInfo `json:"cqs"`
	QPs      []QPInfo `json:"qps"`
	SRQs     int      `json:"srqs"`
	RegBytes uint64   `json:"registered_bytes"`
	// EventsDropped counts asynchronous events the daemon dropped because
	// the client did not read them (its queue was full).
	EventsDropped int64 `json:"events_dropped,omitempty"`
}

type MRInfo struct {
	Handle uint32 `json:"handle"`
	LKey   uint32 `json:"lkey"`
	RKey   uint32 `json:"rkey"`
	Length uint64 `json:"length"`
	Access Access `json:"access"`
}

type CQInfo struct {
	Handle uint32 `json:"handle"`
	Depth  uint32 `json:"depth"`
	Armed  bool   `json:"armed"`
}

type QPInfo struct {
	Handle   uint32           `json:"handle"`
	QPN      uint32           `json:"qpn"`
	Type     string           `json:"type"`
	State    string           `json:"state"`
	Addr     string           `json:"addr"`
	Counters map[string]int64 `json:"counters"`
	// Engine is the index of the engine that serves the QP.
	Engine int `json:"engine"`
	// ClientSocket: the QP's UDP socket is its client's own (ABI 5,
	// CreateQPRequest.Socket); false: the daemon made it (or RC).
	ClientSocket bool `json:"client_socket,omitempty"`
	// Fastpath: who reads the QP's socket when it has a fast-path page
	// (fastpath.go): "rank", "daemon", "taking" (taken over, the rank's
	// Busy not yet seen clear) or "off" (ended by a protocol violation);
	// empty without a page.
	Fastpath string `json:"fastpath,omitempty"`
}

// EngineInfo is one engine of the daemon (docs/engines.md): the CPU its
// thread is pinned to (-1: not pinned), its QPs, its passes (WorkPasses:
// those that did work), its wake-ups from sleep, and the CPU time its
// thread used (CPUTimeNS) since the daemon started (UptimeNS) — their
// ratio is its load.
type EngineInfo struct {
	ID         int   `json:"id"`
	CPU        int   `json:"cpu"`
	QPs        int   `json:"qps"`
	Passes     int64 `json:"passes"`
	WorkPasses int64 `json:"work_passes"`
	Wakeups    int64 `json:"wakeups"`
	CPUTimeNS  int64 `json:"cpu_time_ns"`
	UptimeNS   int64 `json:"uptime_ns"`
}

// ErrorBody is the body of an error reply: what went wrong, for people.
// The errno is in the header's Status.
type ErrorBody struct {
	Error string `json:"error"`
}
