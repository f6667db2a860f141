// Package dgram is the datagram-iWARP profile's framing over UDP
// (docs/wire-format.md §5–§11): one DDP segment per datagram, an optional
// 24-octet RD header in front for reliable-datagram queue pairs, and a
// CRC32c trailer (little-endian) on every datagram.
//
//	UD:      DDP segment | CRC32c
//	RD DATA: RD header | DDP segment | CRC32c
//	RD ACK:  RD header | CRC32c
//
// It encodes and decodes datagrams (ParseUD, ParseRD, AppendUD, AppendRD),
// the RD header (RDHeader, with RFC 1982 serial-number helpers), the default
// port ranges and datagram size, and Framing, the llp.Transport that DDP
// segments against. It judges only the framing (lengths, CRC, RD version and
// type); DDP and RDMAP header semantics are the receive path's, and the RD
// reliability state machine builds on the header defined here.
//
// Imports: the standard library, iwerr, internal/crc32c, llp (never ddp or
// rdmap: the framing sits below them). The tests also use ddp, rdmap and gopacket (pcap writing for the tshark conformance test).
package dgram
