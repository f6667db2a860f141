// Package e2e holds the end-to-end tests of the software RNIC's
// transports (UD, RD over UDP, RC over TCP/MPA: RFC 5040, 5041, 5044 and
// the datagram profile of docs/wire-format.md) and of its control side: a
// verbsd.Server in the test process, real Unix control sockets, real
// shared-memory rings (verbsd/verbsdtest's raw client) and real loopback
// sockets, one server per test (helpers_test.go startServer).
//
// It has no code outside its tests; it imports verbsd and the packages under
// it, and test/daemontest for the shared helpers (Scaled), never the other
// way round. Files by subject: ud_*, rd_*, rc_*, wrec_*, mcast_*, engines_*,
// ready_*, allocs_* (zero allocations per message), fault_*, control_* and
// hostile_* (the control protocol).
package e2e
