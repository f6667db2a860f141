// Package mpa is Marker PDU Aligned framing (RFC 5044) with the enhanced
// connection establishment of RFC 6581: the MPA Request/Reply frames, their
// negotiation as a pure state machine, FPDU framing (ULPDU_Length, pad,
// CRC32c, markers), MULPDU from the EMSS, and a resumable receive path that
// reads an FPDU header first and then places its payload straight into a
// destination buffer.
//
// It owns no socket and no goroutine: callers feed it bytes and read bytes
// from it, so the same code runs in the daemon and in the capture decoder.
//
// Files: frame.go (Request/Reply frames, the RFC 6581 IRD/ORD block),
// negotiate.go (Initiator/Responder state machines; the RFC decisions are
// listed at its top), fpdu.go (sizes, MULPDU, stateless ParseFPDU),
// marker.go (marker placement rules), sender.go (Sender: AppendFPDU, and
// AppendVec for zero-copy gather I/O), receiver.go (resumable Receiver).
//
// Wire facts this package relies on (see ../shared/research/protocol-notes.md):
// the CRC field is always present and is sent little-endian; the CRC covers
// the FPDU from its first octet (a leading marker, if any) to the end of
// PAD, markers included; a marker's FPDUPTR counts back to the ULPDU_Length
// field, and is 0 for a marker placed in front of an FPDU.
//
// Not here: TCP itself, timers (the MPA Reply timeout is the caller's),
// TERMINATE encoding (rdmap), and DDP header parsing (ddp).
//
// Imports: the standard library, iwerr, internal/crc32c.
package mpa
