package main

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"strconv"
)

// rdmaInfo is the only message rping exchanges in its Sends: a buffer the
// peer may access with RDMA, as rdma-core's
//
//	struct rping_rdma_info {
//		__be64 buf;   // the buffer's address (the tagged offset of its first octet)
//		__be32 rkey;  // its STag
//		__be32 size;  // its length in octets
//	};
//
//	 0                   1                   2                   3
//	 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|                        Buf (high 32 bits)                     |
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|                        Buf (low 32 bits)                      |
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|                              RKey                             |
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|                              Size                             |
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//
// All fields are big-endian. The server's "go ahead" Sends carry the same
// 16 octets (rping never fills them: zeros); only their length is checked.
type rdmaInfo struct {
	Buf  uint64
	RKey uint32
	Size uint32
}

// rdmaInfoLen is sizeof(struct rping_rdma_info).
const rdmaInfoLen = 16

var errInfoLen = errors.New("rping: message is not 16 octets")

// parseRDMAInfo decodes a received message; like rping it insists on
// exactly 16 octets.
func parseRDMAInfo(b []byte) (rdmaInfo, int, error) {
	if len(b) != rdmaInfoLen {
		return rdmaInfo{}, 0, fmt.Errorf("%w (got %d)", errInfoLen, len(b))
	}
	return rdmaInfo{
		Buf:  binary.BigEndian.Uint64(b[0:8]),
		RKey: binary.BigEndian.Uint32(b[8:12]),
		Size: binary.BigEndian.Uint32(b[12:16]),
	}, rdmaInfoLen, nil
}

// Append appends the 16-octet encoding of m to b.
func (m *rdmaInfo) Append(b []byte) []byte {
	b = binary.BigEndian.AppendUint64(b, m.Buf)
	b = binary.BigEndian.AppendUint32(b, m.RKey)
	return binary.BigEndian.AppendUint32(b, m.Size)
}

// Len is the encoded length, 16.
func (m *rdmaInfo) Len() int { return rdmaInfoLen }

// Buffer sizes (rping.c): RPING_MIN_BUFSIZE is sizeof("2147483647") +
// sizeof("rdma-ping-%d: ") = 11 + 15; the largest is RPING_BUFSIZE - 1.
const (
	minSize     = 26
	maxSize     = 64*1024 - 1
	defaultSize = 64
)

// Pattern characters: 'A' (65) to 'z' (122), as rping.
const (
	patternFirst = 65
	patternLast  = 122
)

// fillPing writes ping number ping into buf as rping's client does:
// "rdma-ping-<ping>: " then characters cycling from 'A' to 'z' starting at
// start, then a terminating NUL in the last octet. It returns the start
// character of the next ping. len(buf) ≥ minSize.
func fillPing(buf []byte, ping int, start byte) byte {
	prefix := "rdma-ping-" + strconv.Itoa(ping) + ": "
	n := copy(buf, prefix) // snprintf truncates the same way
	c := start
	for i := n; i < len(buf); i++ {
		buf[i] = c
		c++
		if c > patternLast {
			c = patternFirst
		}
	}
	buf[len(buf)-1] = 0
	start++
	if start > patternLast {
		start = patternFirst
	}
	return start
}

// cString returns b up to its first NUL (all of b without one): what
// rping's printf("%s") shows.
func cString(b []byte) []byte {
	if i := bytes.IndexByte(b, 0); i >= 0 {
		return b[:i]
	}
	return b
}
