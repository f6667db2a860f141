#!/usr/bin/env bash
# Installs what the C parts of iwarpd need to build (c/, docs/c-client.md):
# gcc, make, pkg-config, libjansson-dev (JSON of the control protocol) and
# libfabric-dev (the libfabric provider); autoconf, automake and libtool
# (building libfabric's conformance suite, `make fabtests`). Idempotent and non-interactive:
# does nothing when everything is present. `make build` and `make test`
# run it; without root it only says what is missing (the C build is then
# skipped with a message naming this script).
set -euo pipefail

need=()
command -v gcc >/dev/null 2>&1 || need+=(gcc)
command -v make >/dev/null 2>&1 || need+=(make)
command -v pkg-config >/dev/null 2>&1 || need+=(pkg-config)
if ! pkg-config --exists jansson 2>/dev/null; then need+=(libjansson-dev); fi
if [ ! -f /usr/include/rdma/fabric.h ]; then need+=(libfabric-dev); fi
command -v autoreconf >/dev/null 2>&1 || need+=(autoconf)
command -v automake >/dev/null 2>&1 || need+=(automake)
command -v libtoolize >/dev/null 2>&1 || need+=(libtool)

if [ ${#need[@]} -eq 0 ]; then
  exit 0
fi
if [ "$(id -u)" -ne 0 ]; then
  echo "install-build-deps: missing ${need[*]}; run scripts/install-build-deps.sh as root (or apt-get install ${need[*]})" >&2
  exit 0
fi
export DEBIAN_FRONTEND=noninteractive
if ! apt-get update -qq; then
  echo "install-build-deps: apt-get update failed; cannot install ${need[*]}" >&2
  exit 0
fi
if ! apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null; then
  echo "install-build-deps: could not install ${need[*]}" >&2
fi
exit 0
