// Package daemontest starts real iwarpd daemons as separate processes for
// every end-to-end test: it builds the programs once per test binary (Main
// or Build), runs each daemon on a control socket and UDP port block of the
// test's choosing (Start, Options: extra flags, address, network
// namespace, environment, IWARPD_TEST_ENGINES), waits until it answers
// Hello, keeps its log, and stops it at cleanup (SIGTERM, then SIGKILL),
// failing the test with the log if the daemon died on its own. A test that
// ends a daemon itself says so (Signal, Kill, Stop) and reads its exit
// status (Wait).
//
// The C parts (libiwverbs, the provider, c/tests, with or without the
// sanitizers) are built once per checkout and sources into a directory
// every suite shares (SharedC; CProgram), not once per test binary.
//
// Suites call Main (or Build) from TestMain and Start from tests. Port
// blocks are the caller's choice (Options.Ports, Blocks; TCPPorts for
// listeners) so that suites running in parallel never share a port; every
// block must lie below Linux's ephemeral range
// (net.ipv4.ip_local_port_range, 32768-60999 by default).
//
// The suites' private blocks (UD and RD unless said; none may overlap):
//
//	19600-19899  test/integration: single RD ports (rd_test.go, flush_test.go,
//	             crc_test.go 19760-19779)
//	20000-23899  verbsd/e2e: in-process servers, 39 blocks of 100
//	23900-23951  test/daemontest's own tests (TCP: 23950-23951)
//	24000-24099  ofverbs
//	25000-25599  test/atomics (RC listeners: port 0)
//	26000-26199  cmd/iwarp-perf, examples/rping (TCP)
//	26300-26499  cmd/iwarpd
//	26500-26549  test/fastpath: the socket's hand-over (own_test.go)
//	26550-26599  test/fastpath: an RD rank serving its socket (own_rd_test.go)
//	26600-26699  test/fastpath (UD 26600-26649, RD 26650-26699)
//	27000-27499  test/hostile (RD 27580-27589; process memory, limits,
//	             holes, RC hold: 26800-26899, test/hostile/doc.go)
//	27600-27999  test/cclient, test/libfabric
//	28200-28399  test/mpi
//	29000-29899  test/integration (RC 29500-29599, TCP 29800-29899)
//
// ofverbs's end-to-end tests are its external test package (ofverbs_test),
// since this package imports ofverbs.
package daemontest
