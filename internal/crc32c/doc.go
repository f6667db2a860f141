// Package crc32c is the CRC-32C (Castagnoli) digest that MPA (RFC 5044 §6)
// and the datagram profile put after every FPDU or datagram: polynomial
// 0x1EDC6F41 (reflected 0x82F63B78), init and final xor 0xFFFFFFFF, sent
// little-endian on the wire as siw and Wireshark do. It uses the standard
// library's table, which is hardware accelerated (SSE4.2) where available.
//
// Imports: the standard library only.
package crc32c
