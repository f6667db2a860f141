// Package dgram is the datagram-iWARP profile's framing over UDP
// (docs/wire-format.md): one DDP segment per datagram, an optional RD header
// in front for reliable-datagram queue pairs, and a CRC32c trailer on every
// datagram. It encodes and decodes datagrams; the RD reliability state
// machine builds on the header defined here.
//
// Imports: the standard library, iwerr, internal/crc32c, ddp, rdmap.
package dgram
