#!/usr/bin/env bash
# Installs what the test suite needs from Debian's packages: tshark (Wireshark's
# iWARP dissectors are the conformance reference), iproute2 (network
# namespaces, tc netem), iptables and nftables (loss and duplication on
# kernels without netem) and libfabric-bin/-dev (the libfabric provider's
# tests), and staticcheck for `make lint` (scripts/install-lint-deps.sh).
# Idempotent: does nothing when everything is present. Tests that need a
# missing tool skip with a message naming this script.
set -euo pipefail

need=()
command -v tshark >/dev/null 2>&1 || need+=(tshark)
command -v ip >/dev/null 2>&1 || need+=(iproute2)
command -v tc >/dev/null 2>&1 || need+=(iproute2)
command -v iptables >/dev/null 2>&1 || need+=(iptables)
command -v nft >/dev/null 2>&1 || need+=(nftables)
# The libfabric provider's tests (test/libfabric): Debian's fi_info and
# fi_pingpong, and the headers the provider builds against.
command -v fi_pingpong >/dev/null 2>&1 || need+=(libfabric-bin)
[ -e /usr/include/rdma/providers/fi_prov.h ] || need+=(libfabric-dev)
pkg-config --exists jansson 2>/dev/null || need+=(libjansson-dev pkg-config)

# Open MPI, mpicc and fi_info for test/mpi and the MPI benchmark (never fails).
"$(dirname "$0")/install-mpi-deps.sh" || true
# staticcheck for `make lint` (Go module proxy, no root; make lint fails
# without it, so a failure here is only reported).
"$(dirname "$0")/install-lint-deps.sh" >/dev/null || true

if [ ${#need[@]} -eq 0 ]; then
  exit 0
fi
if [ "$(id -u)" -ne 0 ]; then
  echo "install-test-deps: missing ${need[*]}; run as root to install them (tests needing them will skip)" >&2
  exit 0
fi
export DEBIAN_FRONTEND=noninteractive
# tshark asks whether non-root users may capture; answer no without a prompt.
echo "wireshark-common wireshark-common/install-setuid boolean false" | debconf-set-selections 2>/dev/null || true
if ! apt-get update -qq; then
  echo "install-test-deps: apt-get update failed; tests needing ${need[*]} will skip" >&2
  exit 0
fi
if ! apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null; then
  echo "install-test-deps: could not install ${need[*]}; tests needing them will skip" >&2
fi
exit 0
