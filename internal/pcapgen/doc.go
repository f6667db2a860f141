// Package pcapgen writes synthetic but fully valid packet captures (classic
// pcap, Ethernet link type) for tests: real TCP connections between two
// loopback endpoints — three-way handshake with an MSS option, data in both
// directions with correct sequence and acknowledgement numbers, ACKs, FIN
// teardown — and UDP datagrams, with correct IPv4, TCP and UDP checksums.
//
// Captures exist to feed independent decoders (Debian's tshark, the repo's
// iwarpdump) with traffic produced by our own encoders, so pcapgen does not
// know about iWARP at all: callers hand it the TCP payload bytes (MPA frames,
// FPDUs) and say where the segment boundaries go.
//
// Only addresses in 127.0.0.0/8 are accepted: a generated capture can never
// be mistaken for traffic of a real network. Timestamps start at a fixed
// instant and advance by a fixed step per frame, so output is deterministic.
//
// Imports: the standard library and github.com/google/gopacket (layers,
// pcapgo). Test-only infrastructure: nothing in the daemon imports it.
package pcapgen
