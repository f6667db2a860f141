#!/usr/bin/env bash
# Installs what cmd/iwarp-bench can use beyond the project's own binaries:
# fi_pingpong (Debian package libfabric-bin: libfabric's reliable-datagram
# provider "udp;ofi_rxd" is a latency reference), iproute2 (ip netns and
# veth pairs for the veth scenario) and nftables (nft: packet loss on the
# veth scenario's receiving namespace; this kernel has no netem). Idempotent: does nothing when everything
# is present. Never fails: the benchmark skips what is missing and says so.
set -uo pipefail

need=()
command -v fi_pingpong >/dev/null 2>&1 || need+=(libfabric-bin)
command -v ip >/dev/null 2>&1 || need+=(iproute2)
command -v nft >/dev/null 2>&1 || need+=(nftables)

# Open MPI, mpicc and fi_info for test/mpi and the MPI benchmark (never fails).
"$(dirname "$0")/install-mpi-deps.sh" || true

if [ ${#need[@]} -eq 0 ]; then
  exit 0
fi
if [ "$(id -u)" -ne 0 ]; then
  echo "install-bench-deps: missing ${need[*]}; run as root to install them (iwarp-bench skips what needs them)" >&2
  exit 0
fi
if ! command -v apt-get >/dev/null 2>&1; then
  echo "install-bench-deps: no apt-get; install ${need[*]} by hand (iwarp-bench skips what needs them)" >&2
  exit 0
fi
export DEBIAN_FRONTEND=noninteractive
if ! apt-get update -qq; then
  echo "install-bench-deps: apt-get update failed; iwarp-bench skips what needs ${need[*]}" >&2
  exit 0
fi
if ! apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null; then
  echo "install-bench-deps: could not install ${need[*]}; iwarp-bench skips what needs them" >&2
fi
exit 0
