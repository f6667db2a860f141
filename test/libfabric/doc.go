// Package libfabric tests the libfabric provider iwarpd (c/prov,
// libiwarpd-fi.so; docs/libfabric.md) with Debian's own libfabric tools
// against real daemons: fi_info lists the provider's endpoint types and the
// utility providers layered on it, and fi_pingpong -c (data checked)
// passes between two daemons for FI_EP_RDM (0 B to 6 MiB), FI_EP_DGRAM,
// FI_EP_MSG, iwarpd;ofi_rxd and iwarpd;ofi_rxm, on loopback and across two
// network namespaces. The provider's tag matching has a C unit test run
// under AddressSanitizer and UBSan (c/prov/tests/test_match.c), and
// TestPingpongSanitized runs fi_pingpong over a provider built with both
// (SAN=1, leak detection on; the runtimes preloaded into fi_pingpong).
//
// Needs cc, make, pkg-config, libjansson-dev, libfabric-dev and
// libfabric-bin (scripts/install-test-deps.sh installs them); tests skip
// with that message otherwise. Network-namespace tests need root.
//
// Ports (private to this package): daemons UD 27800-27899 and RD
// 27900-27999, in blocks of 25; fi_pingpong's control connections TCP
// 28000-28099; TestNamedPorts' named ports 28100-28198; namespaces
// 169.254.85.1/24 and .2/24, named "iwfi" + PID.
package libfabric
