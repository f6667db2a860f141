package mpa

import "encoding/binary"

// Markers (RFC 5044 §5). When the receiver asked for them (M bit), the sender
// inserts a 4-octet marker every 512 octets of its TCP stream, counted from
// the first octet of the first FPDU it sent (the marker origin, stream
// position 0). Markers count in the stream positions:
//
//	 0                   1                   2                   3
//	 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|           RESERVED            |            FPDUPTR            |
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//
// FPDUPTR is the number of octets from the FPDU's ULPDU_Length field back to
// the marker. A marker position that coincides with the start of an FPDU puts
// the marker in front of the ULPDU_Length field with FPDUPTR 0; the marker
// then belongs to that FPDU (it is covered by its CRC). Every other marker
// belongs to the FPDU it falls in, including one between PAD and CRC, which
// the CRC covers too (as Wireshark computes it). A position just after an
// FPDU's last octet belongs to the next FPDU.
//
// Within one FPDU, the markers sit before the logical octets (ULPDU_Length,
// ULPDU, PAD, CRC without markers) whose wire position is a multiple of 512.
// With m0 the wire offset of the first marker position from the FPDU start,
// marker k sits before logical octet m0 + 508k; it exists when that octet
// does. Real streams keep FPDUs 4-aligned to the origin, so markers never
// split the length or CRC fields; this code does not rely on that.

// MarkerInterval is the spacing of markers in the stream.
const MarkerInterval = 512

// MarkerLen is the length of one marker.
const MarkerLen = 4

// markerStride is the number of logical octets between two markers.
const markerStride = MarkerInterval - MarkerLen

// Marker is one marker found in an FPDU.
type Marker struct {
	StreamPos uint64 // stream position of the marker's first octet
	FPDUPTR   uint16
	Reserved  uint16 // sent 0, not checked
}

// firstMarker returns the wire offset, from an FPDU starting at streamPos,
// of the first marker position.
func firstMarker(streamPos uint64) int {
	return int((MarkerInterval - streamPos%MarkerInterval) % MarkerInterval)
}

// markerCount returns how many markers an FPDU of logicalLen octets starting
// at wire offset m0 from a marker position carries.
func markerCount(m0, logicalLen int) int {
	if m0 >= logicalLen {
		return 0
	}
	return (logicalLen-1-m0)/markerStride + 1
}

// wireOffset returns the wire offset of logical octet x of an FPDU whose first
// marker position is at wire offset m0.
func wireOffset(m0, x int) int {
	if x < m0 {
		return x
	}
	return x + MarkerLen*((x-m0)/markerStride+1)
}

// nextMarkerLogical returns the logical offset of the first marker that
// sits after logical octet x (strictly), for splitting copies.
func nextMarkerLogical(m0, x int) int {
	if x < m0 {
		return m0
	}
	return m0 + markerStride*((x-m0)/markerStride+1)
}

// expectedFPDUPTR is the FPDUPTR of a marker at stream position markerPos in
// the FPDU that starts at fpduStart.
func expectedFPDUPTR(fpduStart, markerPos uint64) uint16 {
	if markerPos == fpduStart {
		return 0
	}
	hdr := fpduStart
	if fpduStart%MarkerInterval == 0 {
		hdr += MarkerLen
	}
	return uint16(markerPos - hdr)
}

// appendMarker appends a marker with the given FPDUPTR.
func appendMarker(b []byte, fpduptr uint16) []byte {
	return binary.BigEndian.AppendUint32(b, uint32(fpduptr))
}
