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
// Imports: the standard library, iwerr, internal/crc32c.
package mpa
