package rdmap

import "fmt"

// Version is the RDMAP version this stack speaks (RFC 5040 §4.3, RV field).
const Version = 1

// Opcode is the 4-bit RDMAP opcode (RFC 5040 §4.3; RFC 7306 §9 for 0x8–0xB).
type Opcode uint8

const (
	OpWrite             Opcode = 0x0
	OpReadRequest       Opcode = 0x1
	OpReadResponse      Opcode = 0x2
	OpSend              Opcode = 0x3
	OpSendInvalidate    Opcode = 0x4
	OpSendSE            Opcode = 0x5
	OpSendSEInvalidate  Opcode = 0x6
	OpTerminate         Opcode = 0x7
	OpImmediateData     Opcode = 0x8 // RFC 7306
	OpImmediateDataSE   Opcode = 0x9 // RFC 7306
	OpAtomicRequest     Opcode = 0xa // RFC 7306
	OpAtomicResponse    Opcode = 0xb // RFC 7306
	OpWriteRecord       Opcode = 0xc // iwarpd datagram profile (docs/wire-format.md); reserved in RFC 5040
	OpWriteRecordImm    Opcode = 0xd // iwarpd datagram profile: Write-Record with Immediate; reserved in RFC 5040/7306
	maxOpcode                  = 0xf
	controlVersionShift        = 6
	controlOpcodeMask          = 0x0f
	controlReservedMask        = 0x30
)

// Untagged queue numbers (RFC 5040 §5.1; RFC 7306 adds QN 3, IANA "RDMAP DDP
// Untagged Queue Numbers").
//
// RFC 7306 puts the Atomic Request on QN 1, beside the RDMA Read Request (both
// are answered by the responder in order and use its IRD), and gives the
// Atomic Response — an untagged message the requester must have a buffer
// for — the new QN 3. QNAtomic is that QN 3.
const (
	QNSend        = 0 // Send variants (and RFC 7306 Immediate Data)
	QNReadRequest = 1 // RDMA Read Request (and RFC 7306 Atomic Request)
	QNTerminate   = 2 // Terminate, and the datagram profile's error messages
	QNAtomic      = 3 // RFC 7306 Atomic Response

	QNAtomicResponse = QNAtomic // the same queue, by its RFC 7306 role
)

// QPTypes is a set of queue pair types, used by the opcode table to say who
// may send an opcode.
type QPTypes uint8

const (
	RC QPTypes = 1 << iota // reliable connected, over TCP/MPA
	UD                     // unreliable datagram, over UDP
	RD                     // reliable datagram, over UDP with the RD header
)

// OpcodeInfo is one row of the opcode table: the facts the wire and the
// engine need about an opcode, in one place (cf. siw's iwarp_pktinfo).
type OpcodeInfo struct {
	Name      string
	Tagged    bool    // DDP tagged buffer model
	QN        uint32  // untagged queue number (untagged opcodes only)
	HeaderLen int     // RDMAP header octets that follow the DDP header
	QPTypes   QPTypes // QP types that may send it; 0 = not supported by iwarpd
	// Fixed reports whether HeaderLen is the whole header (false for Terminate,
	// whose length depends on its control word).
	Fixed bool
}

// Header lengths of the RDMAP headers that follow DDP.
const (
	ReadRequestLen    = 28 // RFC 5040 §4.4
	TerminateFixedLen = 4  // Terminate Control word (RFC 5040 §4.8)
	WriteRecordLen    = 12 // docs/wire-format.md
	WriteRecordImmLen = 20 // docs/wire-format.md: Write-Record header, then Immediate Data
	AtomicRequestLen  = 52 // RFC 7306 Atomic Request header (atomic.go)
	AtomicResponseLen = 12 // RFC 7306 Atomic Response header
	ImmediateDataLen  = 8  // RFC 7306 Immediate Data
	datagramTypes     = UD | RD
	allTypes          = RC | UD | RD
	reliableTypes     = RC | RD
)

var opcodes = [maxOpcode + 1]OpcodeInfo{
	OpWrite:            {Name: "RDMA Write", Tagged: true, QPTypes: RC, Fixed: true},
	OpReadRequest:      {Name: "RDMA Read Request", QN: QNReadRequest, HeaderLen: ReadRequestLen, QPTypes: reliableTypes, Fixed: true},
	OpReadResponse:     {Name: "RDMA Read Response", Tagged: true, QPTypes: reliableTypes, Fixed: true},
	OpSend:             {Name: "Send", QN: QNSend, QPTypes: allTypes, Fixed: true},
	OpSendInvalidate:   {Name: "Send with Invalidate", QN: QNSend, QPTypes: RC, Fixed: true},
	OpSendSE:           {Name: "Send with Solicited Event", QN: QNSend, QPTypes: allTypes, Fixed: true},
	OpSendSEInvalidate: {Name: "Send with Solicited Event and Invalidate", QN: QNSend, QPTypes: RC, Fixed: true},
	OpTerminate:        {Name: "Terminate", QN: QNTerminate, HeaderLen: TerminateFixedLen, QPTypes: allTypes},
	OpImmediateData:    {Name: "Immediate Data", QN: QNSend, HeaderLen: ImmediateDataLen, QPTypes: allTypes, Fixed: true},
	OpImmediateDataSE:  {Name: "Immediate Data with Solicited Event", QN: QNSend, HeaderLen: ImmediateDataLen, QPTypes: allTypes, Fixed: true},
	OpAtomicRequest:    {Name: "Atomic Request", QN: QNReadRequest, HeaderLen: AtomicRequestLen, QPTypes: reliableTypes, Fixed: true},
	OpAtomicResponse:   {Name: "Atomic Response", QN: QNAtomicResponse, HeaderLen: AtomicResponseLen, QPTypes: reliableTypes, Fixed: true},
	OpWriteRecord:      {Name: "RDMA Write-Record", Tagged: true, HeaderLen: WriteRecordLen, QPTypes: datagramTypes, Fixed: true},
	OpWriteRecordImm:   {Name: "RDMA Write-Record with Immediate", Tagged: true, HeaderLen: WriteRecordImmLen, QPTypes: datagramTypes, Fixed: true},
}

// Info returns the table row for op and whether op is defined.
func (op Opcode) Info() (OpcodeInfo, bool) {
	if op > maxOpcode || opcodes[op].Name == "" {
		return OpcodeInfo{}, false
	}
	return opcodes[op], true
}

// IsWriteRecord reports whether op is a Write-Record opcode of the
// datagram profile: OpWriteRecord or OpWriteRecordImm.
func (op Opcode) IsWriteRecord() bool { return op == OpWriteRecord || op == OpWriteRecordImm }

// String returns the RFC name of op.
func (op Opcode) String() string {
	if info, ok := op.Info(); ok {
		return info.Name
	}
	return fmt.Sprintf("opcode 0x%x", uint8(op))
}

// Control is the RDMAP control octet, carried in DDP's RsvdULP[0:7]
// (RFC 5040 §4.3):
//
//	 0 1 2 3 4 5 6 7
//	+-+-+-+-+-+-+-+-+
//	|RV |Rsv| OpCode|
//	+-+-+-+-+-+-+-+-+
type Control uint8

// MakeControl returns the control octet for op with RDMAP version 1.
func MakeControl(op Opcode) Control {
	return Control(Version<<controlVersionShift | uint8(op)&controlOpcodeMask)
}

// Opcode returns the opcode bits.
func (c Control) Opcode() Opcode { return Opcode(c & controlOpcodeMask) }

// Version returns the RV bits.
func (c Control) Version() uint8 { return uint8(c) >> controlVersionShift }

// Reserved returns the Rsv bits (must be 0).
func (c Control) Reserved() uint8 { return uint8(c) & controlReservedMask >> 4 }
