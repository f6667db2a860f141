// Package daemontest starts real iwarpd daemons as separate processes for
// end-to-end tests: it builds the programs once per test binary (Build),
// runs each daemon on a private control socket and UDP port block, waits
// until it answers Hello, and stops it at cleanup (SIGTERM, then SIGKILL),
// failing the test if the daemon died on its own.
//
// Suites call Build from TestMain and Start from tests. Port blocks are the
// caller's choice (Options.Ports) so that suites running in parallel never
// share a port; every block must lie below Linux's ephemeral range
// (net.ipv4.ip_local_port_range, 32768-60999 by default).
package daemontest
