// Package llp is the lower-layer protocol boundary beneath DDP: what DDP needs
// from a transport that carries its segments. Two transports implement it:
// MPA over TCP (package mpa, RFC 5044) and the datagram profile over UDP
// (package llp/dgram, docs/wire-format.md), which adds the RD reliability
// header for reliable-datagram queue pairs.
//
// Imports: the standard library.
package llp
