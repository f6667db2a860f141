package rdmap

import (
	"encoding/binary"
	"errors"
	"fmt"
)

// ErrReadRequestTruncated is returned by ParseReadRequest when fewer than
// ReadRequestLen octets are given.
var ErrReadRequestTruncated = errors.New("rdmap: truncated Read Request header")

// ReadRequest is the RDMA Read Request header (RFC 5040 §4.4). It is the
// whole payload of an untagged DDP message on QN 1 (QNReadRequest) whose
// RDMAP opcode is OpReadRequest; it fits in one DDP segment.
//
//	 0                   1                   2                   3
//	 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|                         Data Sink STag                        |
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|                  Data Sink Tagged Offset                      |
//	+                                                               +
//	|                                                               |
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|                  RDMA Read Message Size                       |
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|                       Data Source STag                        |
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|                 Data Source Tagged Offset                     |
//	+                                                               +
//	|                                                               |
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//
// The Sink STag/TO name where the Read Response is placed (at the
// requester); the Source STag/TO name the data read (at the responder).
// Size 0 is legal (the MPA v2 Read RTR). All fields big-endian.
type ReadRequest struct {
	SinkStag   uint32
	SinkTO     uint64
	Size       uint32
	SourceStag uint32
	SourceTO   uint64
}

// Len returns ReadRequestLen (28).
func (r *ReadRequest) Len() int { return ReadRequestLen }

// Append appends the 28-octet wire form of r to b.
func (r *ReadRequest) Append(b []byte) []byte {
	b = binary.BigEndian.AppendUint32(b, r.SinkStag)
	b = binary.BigEndian.AppendUint64(b, r.SinkTO)
	b = binary.BigEndian.AppendUint32(b, r.Size)
	b = binary.BigEndian.AppendUint32(b, r.SourceStag)
	return binary.BigEndian.AppendUint64(b, r.SourceTO)
}

// ParseReadRequest decodes the Read Request header at the start of b (the
// octets after the untagged DDP header) and returns it with its length.
// Whether the STags and ranges are acceptable is the responder's check.
func ParseReadRequest(b []byte) (ReadRequest, int, error) {
	if len(b) < ReadRequestLen {
		return ReadRequest{}, 0, fmt.Errorf("%w: have %d bytes, need %d", ErrReadRequestTruncated, len(b), ReadRequestLen)
	}
	return ReadRequest{
		SinkStag:   binary.BigEndian.Uint32(b[0:4]),
		SinkTO:     binary.BigEndian.Uint64(b[4:12]),
		Size:       binary.BigEndian.Uint32(b[12:16]),
		SourceStag: binary.BigEndian.Uint32(b[16:20]),
		SourceTO:   binary.BigEndian.Uint64(b[20:28]),
	}, ReadRequestLen, nil
}
