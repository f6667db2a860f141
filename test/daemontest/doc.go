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
// Suites call Main (or Build) from TestMain and Start from tests. Port
// blocks are the caller's choice (Options.Ports, Blocks; TCPPorts for
// listeners) so that suites running in parallel never share a port; every
// block must lie below Linux's ephemeral range
// (net.ipv4.ip_local_port_range, 32768-60999 by default).
//
// ofverbs's own tests (package ofverbs) cannot import this package, which
// imports ofverbs: its external test package hands them Start
// (ofverbs/daemontest_test.go).
package daemontest
