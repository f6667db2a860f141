#!/bin/bash
# fi_pingpong -e rdm, 8 octets, over iwarpd with FI_IWARPD_FASTPATH_RDM=1 and
# =0, and over the tcp provider (docs/fastpath.md "Figures: the provider's
# RDM endpoints"): two loopback daemons (ports 39300-39499), ROUNDS rounds of the three
# interleaved, ITERS round trips each. Binds ports: run it under the test lock.
# Needs make build (bin/, c/build) and libfabric-bin (fi_pingpong).
set -u
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
BIN=${BIN:-$ROOT/bin}
PROV=${PROV:-$ROOT/c/build}
ITERS=${ITERS:-20000}
ROUNDS=${ROUNDS:-3}
D=$(mktemp -d /tmp/fastpath-rdm.XXXX)
$BIN/iwarpd -socket $D/a.sock -ud-ports 39300-39349 -rd-ports 39350-39399 -log-level warn >$D/a.log 2>&1 &
A=$!
$BIN/iwarpd -socket $D/b.sock -ud-ports 39400-39449 -rd-ports 39450-39499 -log-level warn >$D/b.log 2>&1 &
B=$!
trap 'kill $A $B 2>/dev/null; wait $A $B 2>/dev/null; rm -rf $D' EXIT
sleep 0.5
port=47800
one() { # name prov sockA sockB extra-env...
	local name=$1 prov=$2 sa=$3 sb=$4; shift 4
	port=$((port+1))
	env FI_PROVIDER_PATH=$PROV FI_PROVIDER='^ofi_rxm,ofi_rxd' FI_IWARPD_SOCKET=$sa "$@" \
		timeout 120 fi_pingpong -p $prov -e rdm -I $ITERS -S 8 -B $port >$D/srv.out 2>&1 &
	local s=$!
	sleep 0.3
	env FI_PROVIDER_PATH=$PROV FI_PROVIDER='^ofi_rxm,ofi_rxd' FI_IWARPD_SOCKET=$sb "$@" \
		timeout 120 fi_pingpong -p $prov -e rdm -I $ITERS -S 8 -P $port 127.0.0.1 >$D/cli.out 2>&1
	wait $s
	printf '%-12s %s\n' "$name" "$(grep -E '^ *8 ' $D/cli.out | tail -1)"
}
echo "bytes iters total time MB/sec usec/xfer Mxfers/sec"
for r in $(seq $ROUNDS); do
	echo "round $r"
	one rdm=1 iwarpd $D/a.sock $D/b.sock FI_IWARPD_FASTPATH_RDM=1
	one rdm=0 iwarpd $D/a.sock $D/b.sock FI_IWARPD_FASTPATH_RDM=0
	one tcp tcp $D/a.sock $D/b.sock FI_PROVIDER=tcp,ofi_rxm
done
