// Package hostile is the hostile-client and hostile-peer suite (issue 13):
// real daemons (test/daemontest), real hostile processes (this test binary
// re-executed in a helper mode, or raw sockets) and real datagrams, on
// loopback and in network namespaces the tests create. Every attack runs
// beside a well-behaved client that is checked unaffected.
//
// Ports: UD port blocks 27000-27499 (blocks of 50, see main_test.go), single
// fixed ports 27500-27599 (27580-27599: the RD tests, rd_helpers_test.go);
// process-memory tests (procmem_test.go, procmem_window_test.go): RD ports
// 26800-26819 and 26840-26849 (procmem_rdsend_test.go), TCP listeners
// 26850-26853; per-user limits
// (hostile_limits_test.go): TCP listeners 26860-26862; holes in client
// memory (hostile_holes_test.go): TCP listener 26870; the RC receive hold
// (hostile_rchold_test.go): TCP listener 26880; all below Linux's
// ephemeral range.
package hostile
