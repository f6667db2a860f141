// Package dissect decodes iWARP in packet captures: gopacket layers for MPA
// (Request, Reply, FPDU), DDP, RDMAP and the datagram profile, registered in
// one place (layer numbers 1000–1999), a TCP stream reassembler that
// recognises MPA by its Request/Reply frames and follows the negotiated CRC
// and marker settings per direction, and the conformance checks behind
// iwarpdump -strict. It decodes with the same parsers the protocol runs.
//
// Imports: gopacket, iwerr, internal/crc32c, mpa, ddp, rdmap, llp/dgram.
package dissect
