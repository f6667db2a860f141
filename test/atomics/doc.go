// Package atomics holds the end-to-end tests of RFC 7306 atomics and
// immediate data (issue 11, docs/atomics.md): two real iwarpd daemons
// (test/daemontest) on loopback and across network namespaces, RC and RD
// queue pairs, counters hammered with FetchAdd from clients on both hosts
// (with 5 % nftables loss on RD), a CmpSwap lock with mutual exclusion
// checked, immediate data on every transport, and every access violation.
//
// Ports: UD blocks 25000-25399 (8 blocks of 50), RD ports 25400-25599,
// RC listeners port 0 (the daemon picks it); nothing else uses
// 25000-25599.
package atomics
