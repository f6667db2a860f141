// Package test is the root of the repository's cross-package tests: suites
// that exercise several packages together, or check the stack against
// independent decoders, and so belong to no single package.
//
//   - conformance: captures of traffic produced by our own MPA/DDP/RDMAP
//     encoders (written with internal/pcapgen) decoded by Debian's tshark 4.0
//     and by cmd/iwarpdump -strict.
//   - fastpath: the C fast-path datagram codec of libiwverbs
//     (c/core/fastpath.h) against the Go encoders and decoders, both ways,
//     under ASan/UBSan.
//
// Tests that need an external tool (tshark) skip with a message naming
// scripts/install-test-deps.sh when it is absent.
package test
