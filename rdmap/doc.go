// Package rdmap is the RDMA Protocol (RFC 5040) wire vocabulary: the opcode
// table (with the RFC 7306 opcodes and the datagram profile's Write-Record),
// the RDMAP control octet, the RDMA Read Request header, the Terminate message
// (RFC 5040 §4.8) with its error codes (RFC 6580 registries, from iwerr), and
// the Write-Record header of the datagram profile (docs/wire-format.md).
//
// Files: opcode.go (the opcode table, control octet, queue numbers),
// readrequest.go, terminate.go (RFC layout, plus tolerant parsing of Linux
// siw's little-endian bitfield control word; TerminateFor picks the headers to
// include), access.go (access fault → DDP or RDMAP error triple, as siw's
// siw_tagged_error/siw_rdmap_error), writerecord.go.
//
// It does not run a QP: ordering, Read credits (IRD/ORD) and completions are
// the engine's (verbsd). It never logs.
//
// Imports: the standard library, iwerr, ddp.
package rdmap
