package ofverbs

import (
	"net/netip"

	"github.com/iwarpd/iwarpd/proto"
)

// Re-exported ABI types: what QueryDevice/QueryPort report and the enums of
// work requests and completions.
type (
	DeviceAttr = proto.DeviceAttr
	PortAttr   = proto.PortAttr
	Access     = proto.Access
	QPType     = proto.QPType
	QPState    = proto.QPState
	SendOpcode = proto.SendOpcode
	WCStatus   = proto.WCStatus
	WCOpcode   = proto.WCOpcode
	EventType  = proto.EventType
)

// Memory region access flags (as ibv_access_flags).
const (
	AccessLocalWrite   = proto.AccessLocalWrite
	AccessRemoteWrite  = proto.AccessRemoteWrite
	AccessRemoteRead   = proto.AccessRemoteRead
	AccessRemoteAtomic = proto.AccessRemoteAtomic
)

// QP types.
//
// Completion order on the send queue: RC and UD complete work requests in
// posting order. RD (reliable datagram, docs/rd.md "Peers are
// independent") completes them in posting order per destination only: a
// work request never completes before an earlier one to the same peer,
// but one to a live peer may complete before an earlier one to a peer that
// is slow or dead (which is retried for up to -rd-max-retries timeouts).
// Match RD send completions by ID, not by position.
const (
	QPTypeRC = proto.QPTypeRC
	QPTypeUD = proto.QPTypeUD
	QPTypeRD = proto.QPTypeRD
)

// QPCap are a QP's queue sizes: work requests per queue (rounded up to a
// power of two by CreateQP), SGEs per work request, inline bytes.
type QPCap = proto.QPCaps

// QP states.
const (
	QPStateReset = proto.QPStateReset
	QPStateInit  = proto.QPStateInit
	QPStateRTR   = proto.QPStateRTR
	QPStateRTS   = proto.QPStateRTS
	QPStateSQD   = proto.QPStateSQD
	QPStateSQE   = proto.QPStateSQE
	QPStateError = proto.QPStateError
)

// Send work request opcodes.
const (
	WRSend           = proto.WRSend
	WRSendInvalidate = proto.WRSendInvalidate
	WRRDMAWrite      = proto.WRRDMAWrite
	WRRDMARead       = proto.WRRDMARead
	WRWriteRecord    = proto.WRWriteRecord
	WRSendWithImm    = proto.WRSendWithImm  // Send carrying SendWR.Imm (RC, UD, RD)
	WRWriteWithImm   = proto.WRWriteWithImm // RDMA Write + Immediate Data SendWR.Imm (RC)
	WRFetchAdd       = proto.WRFetchAdd     // RFC 7306 FetchAdd: adds CompareAdd (RC, RD)
	WRCmpSwap        = proto.WRCmpSwap      // RFC 7306 CmpSwap: CompareAdd, Swap (RC, RD)
	// WRWriteRecordWithImm is a Write-Record carrying SendWR.Imm (UD, RD):
	// the target's WCRecvWriteRecord completion has WCFlagImm and WC.Imm
	// (docs/write-record.md). The sender's completes as WCWriteRecord.
	WRWriteRecordWithImm = proto.WRWriteRecordWithImm
)

// Device atomic capabilities (DeviceAttr.AtomicCap, as enum ibv_atomic_cap).
const (
	AtomicNone = proto.AtomicNone
	AtomicHCA  = proto.AtomicHCA
	AtomicGlob = proto.AtomicGlob
)

// Work completion statuses (numbered as ibv_wc_status).
const (
	WCSuccess        = proto.WCSuccess
	WCLocLenErr      = proto.WCLocLenErr
	WCLocQPOpErr     = proto.WCLocQPOpErr
	WCLocProtErr     = proto.WCLocProtErr
	WCWRFlushErr     = proto.WCWRFlushErr
	WCBadRespErr     = proto.WCBadRespErr
	WCLocAccessErr   = proto.WCLocAccessErr
	WCRemInvReqErr   = proto.WCRemInvReqErr
	WCRemAccessErr   = proto.WCRemAccessErr
	WCRemOpErr       = proto.WCRemOpErr
	WCRetryExcErr    = proto.WCRetryExcErr
	WCRNRRetryExcErr = proto.WCRNRRetryExcErr
	WCRemAbortErr    = proto.WCRemAbortErr
	WCFatalErr       = proto.WCFatalErr
	WCRespTimeoutErr = proto.WCRespTimeoutErr
	WCGeneralErr     = proto.WCGeneralErr
)

// Work completion opcodes.
const (
	WCSend            = proto.WCSend
	WCRDMAWrite       = proto.WCRDMAWrite
	WCRDMARead        = proto.WCRDMARead
	WCWriteRecord     = proto.WCWriteRecord
	WCFetchAdd        = proto.WCFetchAdd
	WCCmpSwap         = proto.WCCmpSwap
	WCRecv            = proto.WCRecv
	WCRecvWriteRecord = proto.WCRecvWriteRecord
	WCRecvRDMAWithImm = proto.WCRecvRDMAWithImm // RDMA Write with immediate data (RC): WC.Imm
)

// Work completion flags (WC.Flags).
const (
	WCFlagSolicited  = proto.WCFlagSolicited  // a Send with Solicited Event
	WCFlagWithInv    = proto.WCFlagWithInv    // InvStag was invalidated remotely
	WCFlagSrcValid   = proto.WCFlagSrcValid   // Src is valid (datagram receives)
	WCFlagTermValid  = proto.WCFlagTermValid  // Term holds the iWARP error behind Status
	WCFlagRecordTrim = proto.WCFlagRecordTrim // Write-Record: not every byte was placed
	WCFlagImm        = proto.WCFlagImm        // WC.Imm holds immediate data
)

// Asynchronous event types.
const (
	EventQPFatal       = proto.EventQPFatal
	EventQPAccessError = proto.EventQPAccessError
	EventCQError       = proto.EventCQError
	EventSRQLimit      = proto.EventSRQLimit
	EventDeviceFatal   = proto.EventDeviceFatal
	// EventRemoteAccessRefused: a remote peer was refused access to this
	// context's memory through a datagram QP (an invalid STag — a guess —,
	// bounds, rights). Rate-limited; Detail names the source and how many
	// refusals the event stands for.
	EventRemoteAccessRefused = proto.EventRemoteAccessRefused
)

// SGE is a scatter/gather element: Length bytes at Addr (an address in this
// process, inside a registered region: a Buffer's or process memory) of the
// memory region named by LKey.
// MR.SGE builds one from a slice.
type SGE struct {
	Addr   uint64
	Length uint32
	LKey   uint32
}

// SendWR is a send work request.
type SendWR struct {
	ID     uint64     // returned in the completion
	Opcode SendOpcode // WRSend for datagram QPs
	SGL    []SGE      // the message, gathered in order
	// Inline copies the payload into the queue entry at post time: the
	// buffers may be reused as soon as PostSend returns, and need not be
	// registered (but the payload must fit QPCap.MaxInline). The bytes come
	// from InlineData when it is non-nil, else from the SGL, whose addresses
	// must then lie in a Buffer or a process-memory MR of this Context.
	Inline     bool
	InlineData []byte
	Signaled   bool // ask for a completion on success (errors always complete)
	Solicited  bool // Send with Solicited Event
	Fence      bool // wait for prior RDMA Reads
	AH         *AH  // destination of a datagram QP's Send
	// RemoteQKey is the destination QP's Q_Key (datagram QPs); 0 takes
	// the AH's (CreateAHTo). A work request with neither is refused.
	RemoteQKey uint32
	RemoteAddr uint64
	RKey       uint32 // remote STag of RDMA Write/Read, Write-Record, atomics
	InvStag    uint32 // Send with Invalidate
	Imm        uint32 // immediate data of WRSendWithImm / WRWriteWithImm / WRWriteRecordWithImm
	// Atomics (WRFetchAdd, WRCmpSwap; as ibv_send_wr.wr.atomic): the 8
	// octets at RemoteAddr (8-aligned, in an MR with AccessRemoteAtomic)
	// get CompareAdd added (FetchAdd), or Swap stored if they equal
	// CompareAdd (CmpSwap); the original value lands in SGL[0], one SGE
	// of exactly 8 bytes, in host byte order.
	CompareAdd uint64
	Swap       uint64
}

// RecvWR is a receive work request: buffers a message may be scattered into.
type RecvWR struct {
	ID  uint64
	SGL []SGE
}

// WC is a work completion, filled by CQ.Poll.
type WC struct {
	ID      uint64 // the work request's ID
	Status  WCStatus
	Opcode  WCOpcode
	Flags   uint8 // WCFlag...
	ByteLen uint32
	QPN     uint32
	InvStag uint32
	Src     netip.AddrPort // datagram receives (Flags&WCFlagSrcValid)
	Term    uint32         // iWARP error (Flags&WCFlagTermValid)
	TO      uint64         // Write-Record tagged offset
	Imm     uint32         // immediate data (Flags&WCFlagImm)
}

// Err returns nil for a successful completion, else a *WCError.
func (wc WC) Err() error {
	if wc.Status == WCSuccess {
		return nil
	}
	return &WCError{ID: wc.ID, Status: wc.Status, Opcode: wc.Opcode, QPN: wc.QPN, Term: wc.Term,
		TermSet: wc.Flags&WCFlagTermValid != 0}
}

// Solicited reports whether a receive completion was a Send with Solicited Event.
func (wc WC) Solicited() bool { return wc.Flags&WCFlagSolicited != 0 }

// AsyncEvent is an asynchronous event: something happened to a QP, CQ or SRQ
// outside any work request, or the device went away. The object concerned is
// set when this Context knows it.
type AsyncEvent struct {
	Type   EventType
	Handle uint32 // daemon handle of the object concerned
	Detail string
	QP     *QP
	CQ     *CQ
	SRQ    *SRQ
}

func (e AsyncEvent) String() string {
	s := e.Type.String()
	if e.Detail != "" {
		s += ": " + e.Detail
	}
	return s
}
