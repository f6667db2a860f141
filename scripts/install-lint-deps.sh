#!/usr/bin/env bash
# Installs staticcheck (honnef.co/go/tools), the linter `make lint` runs
# beside gofmt and go vet, from the Go module proxy at a pinned version into
# $(go env GOPATH)/bin (no root needed). Idempotent: does nothing when that
# version is already there. `make lint` and scripts/install-test-deps.sh run
# it. Prints the path of the staticcheck binary on its last line.
set -euo pipefail

version=v0.8.2 # the version that knows Go 1.26
go=${GO:-go}
bin="$("$go" env GOPATH)/bin/staticcheck"

if [ -x "$bin" ] && "$bin" -version 2>/dev/null | grep -q "(${version})"; then
  echo "$bin"
  exit 0
fi
# Outside the module: installing a tool must not touch go.mod.
if ! (cd / && GOFLAGS= "$go" install "honnef.co/go/tools/cmd/staticcheck@${version}" >&2); then
  echo "install-lint-deps: could not install staticcheck ${version} (needs the Go module proxy); make lint cannot run it" >&2
  exit 1
fi
echo "$bin"
