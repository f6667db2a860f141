// Package fastpath checks the C fast-path codec of libiwverbs
// (c/core/fastpath.h, docs/design-small-messages.md step 3) against the Go
// implementation the daemon uses: every datagram the C side builds — RD
// and UD Sends with and without Immediate Data, RD ACKs, over many field
// combinations — must equal byte for byte what llp/dgram, ddp and rdmap
// encode for the same fields and the golden datagrams of
// docs/wire-format.md; and every datagram the Go encoders build — Sends,
// ACKs, every other opcode, corrupted, truncated, of a wrong version or
// from a wrong incarnation — must be parsed and classified by the C side
// as a reference classifier written here over the Go decoders says
// (fast-path Send, ACK, or the daemon's, with the reason). The C program
// (c/tests/t_fastpath.c) is built with -fsanitize=address,undefined, so
// the same runs check its memory safety, and it also runs a bounded
// random-input loop through the parsers. TestLiveRD and TestLiveUD start
// two real daemons (UD ports 26600-26649, RD 26650-26699) whose Sends and
// ACKs pass through a recording UDP relay in the test: every one of their
// datagrams must be rebuilt byte for byte by the C builder and classified
// as the reference says (no stored capture of datagram-iWARP traffic
// exists). Run the package under the test lock; it needs a C compiler and
// skips without one.
//
// IWARPD_FASTPATH_BENCH=1 also builds it with -O2 and logs the ns per
// encode+CRC and per parse of an 8 B Send (figures only, never asserted).
package fastpath
