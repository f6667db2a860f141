#!/usr/bin/env bash
# Installs what the MPI tests (test/mpi) and the MPI section of the
# benchmark (cmd/iwarp-bench, bench/mpi) need from Debian's packages: Open MPI
# (openmpi-bin: mpirun; libopenmpi-dev: mpicc and mpi.h), libfabric's tools
# (libfabric-bin: fi_info) and a C compiler (gcc). Debian's MPICH is built
# ch4:ucx and cannot use a libfabric provider: Open MPI is the MPI to run
# (docs/mpi.md). Idempotent and non-interactive: does nothing when everything
# is present. Never fails: what needs a missing tool skips (tests) or prints
# a MISS line (benchmark) naming this script.
set -uo pipefail

need=()
command -v mpirun >/dev/null 2>&1 || need+=(openmpi-bin)
command -v mpicc >/dev/null 2>&1 || need+=(libopenmpi-dev)
command -v fi_info >/dev/null 2>&1 || need+=(libfabric-bin)
command -v gcc >/dev/null 2>&1 || need+=(gcc)

if [ ${#need[@]} -eq 0 ]; then
  exit 0
fi
if [ "$(id -u)" -ne 0 ]; then
  echo "install-mpi-deps: missing ${need[*]}; run as root to install them (MPI tests skip, the MPI benchmark prints MISS)" >&2
  exit 0
fi
if ! command -v apt-get >/dev/null 2>&1; then
  echo "install-mpi-deps: no apt-get; install ${need[*]} by hand (MPI tests skip, the MPI benchmark prints MISS)" >&2
  exit 0
fi
export DEBIAN_FRONTEND=noninteractive
if ! apt-get update -qq; then
  echo "install-mpi-deps: apt-get update failed; MPI tests need ${need[*]}" >&2
  exit 0
fi
if ! apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null; then
  echo "install-mpi-deps: could not install ${need[*]}; MPI tests skip, the MPI benchmark prints MISS" >&2
fi
exit 0
