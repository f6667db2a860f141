#!/usr/bin/env bash
# Runs every native Go fuzz target in the module for a bounded time each.
# Usage: scripts/fuzz.sh [DURATION]   (default 10s per target)
#        make fuzz FUZZTIME=10m       (a longer run: 10 minutes per target)
# `go test` (make test) already runs every target once on its seed corpus
# (f.Add and testdata/fuzz/<Name>/); this script searches beyond it. A
# failing input is written to the package's testdata/fuzz/<Name>/: commit
# it with the fix, and every later `make test` replays it.
set -euo pipefail
cd "$(dirname "$0")/.."
fuzztime=${1:-10s}
failed=0
for pkg in $(go list ./...); do
  targets=$(go test -list '^Fuzz' "$pkg" 2>/dev/null | grep '^Fuzz' || true)
  for target in $targets; do
    echo "== $pkg $target ($fuzztime)"
    if ! go test -run '^$' -fuzz "^${target}\$" -fuzztime "$fuzztime" "$pkg"; then
      failed=1
    fi
  done
done
exit $failed
