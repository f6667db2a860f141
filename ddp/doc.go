// Package ddp is the Direct Data Placement protocol (RFC 5041): the tagged
// (14-octet) and untagged (18-octet) segment headers, segmentation of a ULP
// message into segments no larger than the lower layer's maximum (MULPDU for
// MPA, the datagram size for the datagram profile), and the receive-side
// checks that turn a malformed segment into the exact DDP error of
// RFC 5041 §7.2.
//
// DDP sits on the LLP: it never imports mpa; MPA (over TCP) and the datagram
// LLP (over UDP) both carry DDP segments. It does not know what the RsvdULP
// bits mean (that is rdmap's), and it does not own memory: placement targets
// are resolved by the caller.
//
// Files: header.go (the two header codecs), segment.go (Segmenter,
// MSNCounter), validate.go (Receiver.Check: the RFC 5041 §7.2 error for each
// receive-side violation).
//
// Imports: the standard library, iwerr, llp (for llp.Transport's MaxSegment).
package ddp
