// Package dissect decodes iWARP in packet captures: gopacket layers for MPA
// (Request, Reply, FPDU), DDP, RDMAP and the datagram profile, registered in
// one place (layer numbers 1000–1999), a TCP stream reassembler that
// recognises MPA by its Request/Reply frames and follows the negotiated CRC
// and marker settings per direction, and the conformance checks behind
// iwarpdump -strict. It decodes with the same parsers the protocol runs.
//
// Layer types (registered once, in layers.go, numbers 1400–1405):
// LayerTypeMPAFrame, LayerTypeMPAFPDU, LayerTypeDDP, LayerTypeRDMAP,
// LayerTypeDatagramUD, LayerTypeDatagramRD. FPDUDecoder and DatagramDecoder
// decode with non-default MPA or CRC settings. Decoder / Decode / DecodeFile
// turn whole captures into Events; the checks are listed in
// docs/iwarpdump.md. dissect never parses a wire format itself: every codec
// call goes to mpa, ddp, rdmap or llp/dgram (codecs.go adapts them).
//
// Imports: gopacket (layers, pcapgo), mpa, ddp, rdmap, llp/dgram.
package dissect
