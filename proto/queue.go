package proto

import (
	"encoding/binary"
	"fmt"
	"net/netip"
)

// Ring layout. Every queue (SQ, RQ, SRQ, CQ) is a single-producer
// single-consumer ring in shared memory: a RingHeaderLen-octet header, then
// Depth entries of Stride octets. Indices are free-running uint32 counters;
// entry i lives at RingHeaderLen + (i mod Depth)·Stride. The producer writes
// an entry, then publishes it by storing Producer (atomically); the consumer
// copies the entry out, then stores Consumer. Each index has its own cache
// line so the two sides never share one.
//
//	0    Magic     u32  "IWRQ"
//	4    Version   u16  ABIVersion
//	6    Kind      u16  RingKind
//	8    Depth     u32  entries, a power of two
//	12   Stride    u32  octets per entry, a multiple of 16
//	64   Producer  u32
//	128  Consumer  u32
//	192  Arm       u32  CQ only: ArmNone, ArmNext, ArmSolicited (client sets, daemon clears)
//	196  Overrun   u32  CQ only: set by the daemon when the CQ overflowed
const RingMagic uint32 = 0x51525749 // "IWRQ"

// Offsets in the ring header (untyped: used with any integer type).
const (
	RingHeaderLen   = 256
	OffRingMagic    = 0
	OffRingVersion  = 4
	OffRingKind     = 6
	OffRingDepth    = 8
	OffRingStride   = 12
	OffRingProducer = 64
	OffRingConsumer = 128
	OffRingArm      = 192
	OffRingOverrun  = 196
)

// RingKind says what a ring holds.
type RingKind uint16

const (
	RingSQ  RingKind = 1
	RingRQ  RingKind = 2
	RingCQ  RingKind = 3
	RingSRQ RingKind = 4
)

// CQ arming values (the Arm word).
const (
	ArmNone      uint32 = 0
	ArmNext      uint32 = 1 // notify on the next completion
	ArmSolicited uint32 = 2 // notify on the next solicited receive or any error completion
)

// PageSize is the granule of shared-memory regions.
const PageSize = 4096

// MaxDepth bounds every ring.
const MaxDepth = 1 << 16

// RingBytes returns the size of a ring region, rounded up to whole pages.
func RingBytes(depth, stride uint32) int {
	n := RingHeaderLen + int(depth)*int(stride)
	return (n + PageSize - 1) &^ (PageSize - 1)
}

// InitRingHeader writes a fresh header into b (at least RingHeaderLen octets).
func InitRingHeader(b []byte, kind RingKind, depth, stride uint32) {
	clear(b[:RingHeaderLen])
	binary.LittleEndian.PutUint32(b[OffRingMagic:], RingMagic)
	binary.LittleEndian.PutUint16(b[OffRingVersion:], ABIVersion)
	binary.LittleEndian.PutUint16(b[OffRingKind:], uint16(kind))
	binary.LittleEndian.PutUint32(b[OffRingDepth:], depth)
	binary.LittleEndian.PutUint32(b[OffRingStride:], stride)
}

// CheckRingHeader validates the static part of a ring header that a peer
// prepared: magic, version, kind, depth and stride as agreed, and that
// size octets hold the whole ring.
func CheckRingHeader(b []byte, kind RingKind, depth, stride uint32) error {
	if len(b) < RingHeaderLen {
		return fmt.Errorf("proto: ring: region of %d bytes is smaller than a ring header", len(b))
	}
	if m := binary.LittleEndian.Uint32(b[OffRingMagic:]); m != RingMagic {
		return fmt.Errorf("proto: ring: bad magic %#x", m)
	}
	if v := binary.LittleEndian.Uint16(b[OffRingVersion:]); v != ABIVersion {
		return &VersionError{Local: ABIVersion, Peer: v, Side: "daemon"}
	}
	if k := RingKind(binary.LittleEndian.Uint16(b[OffRingKind:])); k != kind {
		return fmt.Errorf("proto: ring: kind %d, want %d", k, kind)
	}
	if d := binary.LittleEndian.Uint32(b[OffRingDepth:]); d != depth {
		return fmt.Errorf("proto: ring: depth %d, want %d", d, depth)
	}
	if s := binary.LittleEndian.Uint32(b[OffRingStride:]); s != stride {
		return fmt.Errorf("proto: ring: stride %d, want %d", s, stride)
	}
	if len(b) < RingBytes(depth, stride) {
		return fmt.Errorf("proto: ring: region of %d bytes cannot hold %d entries of %d bytes", len(b), depth, stride)
	}
	return nil
}

// ValidDepth reports whether d is an allowed ring depth.
func ValidDepth(d uint32) bool { return d >= 1 && d <= MaxDepth && d&(d-1) == 0 }

// SGE is a scatter/gather element: Length octets at Addr in the client's
// address space, inside the memory region named by LKey.
//
//	0  Addr   u64
//	8  Length u32
//	12 LKey   u32
type SGE struct {
	Addr   uint64
	Length uint32
	LKey   uint32
}

// SGELen is the encoded size of an SGE.
const SGELen = 16

func (s SGE) Put(b []byte) {
	_ = b[SGELen-1]
	binary.LittleEndian.PutUint64(b, s.Addr)
	binary.LittleEndian.PutUint32(b[8:], s.Length)
	binary.LittleEndian.PutUint32(b[12:], s.LKey)
}

func GetSGE(b []byte) SGE {
	_ = b[SGELen-1]
	return SGE{Addr: binary.LittleEndian.Uint64(b), Length: binary.LittleEndian.Uint32(b[8:]), LKey: binary.LittleEndian.Uint32(b[12:])}
}

// SendOpcode is a send work request's operation.
type SendOpcode uint8

const (
	WRSend            SendOpcode = 0
	WRSendInvalidate  SendOpcode = 1
	WRRDMAWrite       SendOpcode = 2
	WRRDMARead        SendOpcode = 3
	WRWriteRecord     SendOpcode = 4
	WRLocalInvalidate SendOpcode = 5 // invalidate the STag in InvStag locally (RC)
	WRSendWithImm     SendOpcode = 6 // Send carrying Imm (RC: Send + RFC 7306 Immediate Data; UD/RD: docs/atomics.md)
	WRWriteWithImm    SendOpcode = 7 // RDMA Write + RFC 7306 Immediate Data (RC)
	WRFetchAdd        SendOpcode = 8 // RFC 7306 FetchAdd; operands in the SQE body (AtomicOperands)
	WRCmpSwap         SendOpcode = 9 // RFC 7306 CmpSwap; operands in the SQE body (AtomicOperands)
	// WRWriteRecordWithImm is a Write-Record carrying Imm (UD, RD;
	// docs/write-record.md): the target's record completion has WCFlagImm.
	WRWriteRecordWithImm SendOpcode = 10
)

// wrOpcodeCount is one past the last send opcode.
const wrOpcodeCount = 11

func (op SendOpcode) String() string {
	switch op {
	case WRSend:
		return "send"
	case WRSendInvalidate:
		return "send-with-invalidate"
	case WRRDMAWrite:
		return "rdma-write"
	case WRRDMARead:
		return "rdma-read"
	case WRWriteRecord:
		return "write-record"
	case WRLocalInvalidate:
		return "local-invalidate"
	case WRSendWithImm:
		return "send-with-imm"
	case WRWriteWithImm:
		return "rdma-write-with-imm"
	case WRFetchAdd:
		return "atomic-fetch-add"
	case WRCmpSwap:
		return "atomic-cmp-swap"
	case WRWriteRecordWithImm:
		return "write-record-with-imm"
	}
	return fmt.Sprintf("opcode(%d)", uint8(op))
}

// Valid reports whether op is a defined opcode.
func (op SendOpcode) Valid() bool { return op < wrOpcodeCount }

// Atomic reports whether op is an RFC 7306 atomic (FetchAdd, CmpSwap).
func (op SendOpcode) Atomic() bool { return op == WRFetchAdd || op == WRCmpSwap }

// WriteRecord reports whether op is a Write-Record (with or without
// immediate data).
func (op SendOpcode) WriteRecord() bool { return op == WRWriteRecord || op == WRWriteRecordWithImm }

// ReadOrAtomic reports whether op waits for a response from the peer and
// counts against the ORD: an RDMA Read or an atomic.
func (op SendOpcode) ReadOrAtomic() bool { return op == WRRDMARead || op.Atomic() }

// AtomicOperands are the operands of an atomic work request, the first
// AtomicOperandsLen octets of the SQE body (at SQEHeaderLen); the NumSGE
// (= 1) SGE naming the 8-octet result buffer follows them:
//
//	64  CompareAdd u64  FetchAdd: the addend; CmpSwap: the compare value
//	72  Swap       u64  CmpSwap: the swap value (FetchAdd: zero)
//	80  SGE            the result buffer (8 octets, local write)
//
// (ibv_send_wr.wr.atomic's compare_add and swap.)
type AtomicOperands struct {
	CompareAdd uint64
	Swap       uint64
}

// AtomicOperandsLen is the encoded size of AtomicOperands.
const AtomicOperandsLen = 16

// Put encodes a into b (at least AtomicOperandsLen octets).
func (a AtomicOperands) Put(b []byte) {
	_ = b[AtomicOperandsLen-1]
	binary.LittleEndian.PutUint64(b, a.CompareAdd)
	binary.LittleEndian.PutUint64(b[8:], a.Swap)
}

// GetAtomicOperands decodes the operands at the start of b.
func GetAtomicOperands(b []byte) AtomicOperands {
	_ = b[AtomicOperandsLen-1]
	return AtomicOperands{CompareAdd: binary.LittleEndian.Uint64(b), Swap: binary.LittleEndian.Uint64(b[8:])}
}

// atomicBodyMin is the smallest SQE body: an atomic's operands and its
// result SGE.
const atomicBodyMin = AtomicOperandsLen + SGELen

// Send work request flags.
const (
	SendSignaled  uint8 = 1 << 0 // generate a completion (always, with SigAll)
	SendSolicited uint8 = 1 << 1 // Send with Solicited Event
	SendInline    uint8 = 1 << 2 // payload is in the SQE, not in SGEs
	SendFence     uint8 = 1 << 3 // wait for prior RDMA Reads
	sendFlagsAll        = SendSignaled | SendSolicited | SendInline | SendFence
)

// SQE is a send queue entry. Its slot is SQEStride octets: a 64-octet
// header followed by NumSGE SGEs, or by InlineLen octets of inline data.
//
//	0   WRID       u64
//	8   Opcode     u8
//	9   Flags      u8
//	10  NumSGE     u16
//	12  InlineLen  u32
//	16  Imm        u32  immediate data (WRSendWithImm, WRWriteWithImm, WRWriteRecordWithImm; else zero)
//	20  RKey       u32  remote STag (Write, Read, Write-Record)
//	24  RemoteAddr u64  remote tagged offset
//	32  InvStag    u32  STag to invalidate (Send with Invalidate)
//	36  AH         [20] datagram QPs: the destination, an AddressVector
//	                    (zero on RC QPs)
//	56  QKey       u32  datagram QPs: the destination QP's Q_Key
//	                    (docs/wire-format.md §5.1; zero on RC QPs)
//	60  reserved (4 octets, zero)
//	64  SGEs or inline data (atomics: AtomicOperands, then the result SGE)
//
// A datagram QP's address handle lives in the client only (as mlx5's UD
// address vector does): the client copies its address vector into every
// SQE, and the daemon validates it per work request (AddressVector.AddrPort).
type SQE struct {
	WRID       uint64
	Opcode     SendOpcode
	Flags      uint8
	NumSGE     uint16
	InlineLen  uint32
	RKey       uint32
	RemoteAddr uint64
	InvStag    uint32
	AH         AddressVector
	Imm        uint32 // immediate data (WRSendWithImm, WRWriteWithImm, WRWriteRecordWithImm)
	QKey       uint32 // datagram QPs: the destination's Q_Key
}

// OffSQEQKey is where an SQE holds the remote Q_Key.
const OffSQEQKey = 56

// SQEHeaderLen is the size of the fixed part of an SQE.
const SQEHeaderLen = 64

// SQEStride returns the slot size for a SQ allowing maxSGE SGEs and
// maxInline octets of inline data: header plus the larger of the two,
// rounded up to 64 octets. The body always has room for an atomic's
// operands and result SGE (atomicBodyMin).
func SQEStride(maxSGE, maxInline uint32) uint32 {
	body := max(maxSGE*SGELen, maxInline, atomicBodyMin)
	return (SQEHeaderLen + body + 63) &^ 63
}

// Put encodes the fixed part of e into b (at least SQEHeaderLen octets).
func (e *SQE) Put(b []byte) {
	_ = b[SQEHeaderLen-1]
	binary.LittleEndian.PutUint64(b, e.WRID)
	b[8] = uint8(e.Opcode)
	b[9] = e.Flags
	binary.LittleEndian.PutUint16(b[10:], e.NumSGE)
	binary.LittleEndian.PutUint32(b[12:], e.InlineLen)
	binary.LittleEndian.PutUint32(b[16:], e.Imm)
	binary.LittleEndian.PutUint32(b[20:], e.RKey)
	binary.LittleEndian.PutUint64(b[24:], e.RemoteAddr)
	binary.LittleEndian.PutUint32(b[32:], e.InvStag)
	e.AH.put(b[OffSQEAH:])
	binary.LittleEndian.PutUint32(b[OffSQEQKey:], e.QKey)
	clear(b[OffSQEQKey+4 : SQEHeaderLen])
}

// GetSQE decodes the fixed part of an SQE. The caller validates every field.
func GetSQE(b []byte) SQE {
	_ = b[SQEHeaderLen-1]
	return SQE{
		WRID:       binary.LittleEndian.Uint64(b),
		Opcode:     SendOpcode(b[8]),
		Flags:      b[9],
		NumSGE:     binary.LittleEndian.Uint16(b[10:]),
		InlineLen:  binary.LittleEndian.Uint32(b[12:]),
		RKey:       binary.LittleEndian.Uint32(b[20:]),
		RemoteAddr: binary.LittleEndian.Uint64(b[24:]),
		InvStag:    binary.LittleEndian.Uint32(b[32:]),
		AH:         getAddressVector(b[OffSQEAH:]),
		Imm:        binary.LittleEndian.Uint32(b[16:]),
		QKey:       binary.LittleEndian.Uint32(b[OffSQEQKey:]),
	}
}

// KnownFlags reports whether e.Flags has only defined bits.
func (e *SQE) KnownFlags() bool { return e.Flags&^sendFlagsAll == 0 }

// RQE is a receive queue entry: a 16-octet header and NumSGE SGEs.
//
//	0  WRID    u64
//	8  NumSGE  u16
//	10 reserved (6 octets, zero)
//	16 SGEs
type RQE struct {
	WRID   uint64
	NumSGE uint16
}

// RQEHeaderLen is the size of the fixed part of an RQE.
const RQEHeaderLen = 16

// RQEStride returns the slot size for a RQ or SRQ allowing maxSGE SGEs.
func RQEStride(maxSGE uint32) uint32 { return RQEHeaderLen + max(maxSGE, 1)*SGELen }

func (e *RQE) Put(b []byte) {
	_ = b[RQEHeaderLen-1]
	binary.LittleEndian.PutUint64(b, e.WRID)
	binary.LittleEndian.PutUint16(b[8:], e.NumSGE)
	clear(b[10:RQEHeaderLen])
}

func GetRQE(b []byte) RQE {
	_ = b[RQEHeaderLen-1]
	return RQE{WRID: binary.LittleEndian.Uint64(b), NumSGE: binary.LittleEndian.Uint16(b[8:])}
}

// WCStatus is a work completion status (numbered as ibv_wc_status).
type WCStatus uint8

const (
	WCSuccess          WCStatus = 0
	WCLocLenErr        WCStatus = 1
	WCLocQPOpErr       WCStatus = 2
	WCLocProtErr       WCStatus = 4
	WCWRFlushErr       WCStatus = 5
	WCBadRespErr       WCStatus = 7
	WCLocAccessErr     WCStatus = 8
	WCRemInvReqErr     WCStatus = 9
	WCRemAccessErr     WCStatus = 10
	WCRemOpErr         WCStatus = 11
	WCRetryExcErr      WCStatus = 12
	WCRNRRetryExcErr   WCStatus = 13
	WCRemAbortErr      WCStatus = 16
	WCFatalErr         WCStatus = 19
	WCRespTimeoutErr   WCStatus = 20
	WCGeneralErr       WCStatus = 21
	wcStatusNamesCount          = 22
)

var wcStatusNames = [wcStatusNamesCount]string{
	WCSuccess: "success", WCLocLenErr: "local length error", WCLocQPOpErr: "local QP operation error",
	WCLocProtErr: "local protection error", WCWRFlushErr: "work request flushed",
	WCBadRespErr: "bad response", WCLocAccessErr: "local access error", WCRemInvReqErr: "remote invalid request",
	WCRemAccessErr: "remote access error", WCRemOpErr: "remote operation error", WCRetryExcErr: "transport retry counter exceeded",
	WCRNRRetryExcErr: "RNR retry counter exceeded", WCRemAbortErr: "remote aborted", WCFatalErr: "fatal error",
	WCRespTimeoutErr: "response timeout", WCGeneralErr: "general error",
}

func (s WCStatus) String() string {
	if int(s) < len(wcStatusNames) && wcStatusNames[s] != "" {
		return wcStatusNames[s]
	}
	return fmt.Sprintf("status(%d)", uint8(s))
}

// WCOpcode says what a completion completes.
type WCOpcode uint8

const (
	WCSend            WCOpcode = 0
	WCRDMAWrite       WCOpcode = 1
	WCRDMARead        WCOpcode = 2
	WCWriteRecord     WCOpcode = 3
	WCLocalInvalidate WCOpcode = 4
	WCFetchAdd        WCOpcode = 5
	WCCmpSwap         WCOpcode = 6
	WCRecv            WCOpcode = 128
	WCRecvWriteRecord WCOpcode = 129
	WCRecvRDMAWithImm WCOpcode = 130 // an RDMA Write with immediate data (RC): Imm valid, ByteLen 0
)

func (op WCOpcode) String() string {
	switch op {
	case WCSend:
		return "send"
	case WCRDMAWrite:
		return "rdma-write"
	case WCRDMARead:
		return "rdma-read"
	case WCWriteRecord:
		return "write-record"
	case WCLocalInvalidate:
		return "local-invalidate"
	case WCFetchAdd:
		return "atomic-fetch-add"
	case WCCmpSwap:
		return "atomic-cmp-swap"
	case WCRecvRDMAWithImm:
		return "recv-rdma-with-imm"
	case WCRecv:
		return "recv"
	case WCRecvWriteRecord:
		return "recv-write-record"
	}
	return fmt.Sprintf("wcopcode(%d)", uint8(op))
}

// Completion flags.
const (
	WCFlagSolicited  uint8 = 1 << 0 // a Send with Solicited Event
	WCFlagWithInv    uint8 = 1 << 1 // InvStag was invalidated remotely
	WCFlagSrcValid   uint8 = 1 << 2 // SrcIP/SrcPort are valid (datagram receives)
	WCFlagTermValid  uint8 = 1 << 3 // Term holds the iWARP error behind Status
	WCFlagRecordTrim uint8 = 1 << 4 // Write-Record: not every byte was placed
	WCFlagImm        uint8 = 1 << 5 // Imm holds immediate data
)

// CQE is a completion queue entry, CQESize octets:
//
//	0   WRID     u64
//	8   Status   u8
//	9   Opcode   u8
//	10  Flags    u8
//	11  reserved u8
//	12  ByteLen  u32
//	16  QPN      u32
//	20  InvStag  u32  invalidated STag, or the target STag of a Write-Record
//	24  SrcIP    [16] IPv6 or IPv4-mapped
//	40  SrcPort  u16
//	42  reserved u16
//	44  Term     u32  iWARP error: layer<<16 | etype<<8 | ecode
//	48  TO       u64  Write-Record: tagged offset of the message
//	56  Imm      u32  immediate data (with WCFlagImm)
//	60  reserved (4 octets)
type CQE struct {
	WRID    uint64
	Status  WCStatus
	Opcode  WCOpcode
	Flags   uint8
	ByteLen uint32
	QPN     uint32
	InvStag uint32
	Src     netip.AddrPort
	Term    uint32
	TO      uint64
	Imm     uint32
}

// CQESize is the size of a CQE.
const CQESize = 64

func (e *CQE) Put(b []byte) {
	_ = b[CQESize-1]
	binary.LittleEndian.PutUint64(b, e.WRID)
	b[8] = uint8(e.Status)
	b[9] = uint8(e.Opcode)
	b[10] = e.Flags
	b[11] = 0
	binary.LittleEndian.PutUint32(b[12:], e.ByteLen)
	binary.LittleEndian.PutUint32(b[16:], e.QPN)
	binary.LittleEndian.PutUint32(b[20:], e.InvStag)
	ip := e.Src.Addr().As16()
	copy(b[24:40], ip[:])
	binary.LittleEndian.PutUint16(b[40:], e.Src.Port())
	b[42], b[43] = 0, 0
	binary.LittleEndian.PutUint32(b[44:], e.Term)
	binary.LittleEndian.PutUint64(b[48:], e.TO)
	binary.LittleEndian.PutUint32(b[56:], e.Imm)
	clear(b[60:CQESize])
}

// GetCQE decodes a CQE into e (no allocation).
func GetCQE(b []byte, e *CQE) {
	_ = b[CQESize-1]
	e.WRID = binary.LittleEndian.Uint64(b)
	e.Status = WCStatus(b[8])
	e.Opcode = WCOpcode(b[9])
	e.Flags = b[10]
	e.ByteLen = binary.LittleEndian.Uint32(b[12:])
	e.QPN = binary.LittleEndian.Uint32(b[16:])
	e.InvStag = binary.LittleEndian.Uint32(b[20:])
	e.Src = netip.AddrPortFrom(netip.AddrFrom16([16]byte(b[24:40])).Unmap(), binary.LittleEndian.Uint16(b[40:]))
	e.Term = binary.LittleEndian.Uint32(b[44:])
	e.TO = binary.LittleEndian.Uint64(b[48:])
	e.Imm = binary.LittleEndian.Uint32(b[56:])
}

// Status page: one read-only page the daemon shares with every client.
//
//	0   Magic    u32  "IWST"
//	4   Version  u16
//	64  Asleep   u32  1 while the engine sleeps: a client that publishes
//	                  work then reads 1 must write the doorbell eventfd
//	128 Epoch    u32  incremented by the engine on every wake-up (diagnostics)
const (
	StatusMagic     uint32 = 0x54535749 // "IWST"
	StatusPageLen          = PageSize
	OffStatusMagic         = 0
	OffStatusVer           = 4
	OffStatusAsleep        = 64
	OffStatusEpoch         = 128
)
