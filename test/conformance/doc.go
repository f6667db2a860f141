// Package conformance checks that what our encoders put on the wire is what
// independent decoders expect. Its tests build whole MPA conversations with
// the mpa, ddp and rdmap packages (Request/Reply negotiation, then FPDUs in
// both directions: Sends of many sizes, Send with SE and/or Invalidate, RDMA
// Write, RDMA Read Request and Response, Terminate, the RFC 6581 RTR) for MPA
// revision 1 and 2, CRC on and off, and markers, write them as pcap files
// with internal/pcapgen, and then run:
//
//   - Debian's tshark 4.0 (-T fields, -T pdml and -z expert): every FPDU
//     decoded, every CRC Good when negotiated, the opcode/MSN/MO/STag/TO
//     sequence equal to what was encoded, no malformed frame, no expert
//     error, and only the whitelisted expert warnings (Rev≠1 and Res≠0 on
//     revision 2, protocol-notes.md §D);
//   - the repository's iwarpdump -strict, which must exit 0 and report the
//     same number of DDP segments.
//
// The non-test file holds the tshark/iwarpdump runners. Set
// IWARPD_KEEP_CAPTURES=dir to keep the generated pcaps.
package conformance
