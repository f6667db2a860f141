#!/bin/bash
# fi_rdm_tagged_bw -S 8 -W 64 (a window of 64 tagged sends of 8 octets, the
# message rate) over iwarpd with the RDM fast path (the default), with
# FI_IWARPD_FASTPATH_RDM=0 (every message through the daemons) and over
# the tcp provider (docs/fastpath.md "Figures: the provider's RDM
# endpoints"). Two loopback daemons (ports 39300-39499); prints the rate
# line of each and the provider's close log ("N sends sent by the rank,
# ..., D datagrams in F flushes"). Binds ports: run it under the test lock:
#   timeout 200 flock /tmp/iwarpd-test.lock bench/fastpath-rdm-rate/run.sh
# On 2026-11-29 the tcp configuration printed no rate here (fi_rdm_tagged_bw
# -p tcp did not finish within its timeout; not analysed).
# Needs make build (bin/, c/build) and fabtests' fi_rdm_tagged_bw (FT, by
# default /work/fabtests-suite/bin).
set -u
ROOT=${ROOT:-$(cd "$(dirname "$0")/../.." && pwd)}
BIN=${BIN:-$ROOT/bin}
PROV=${PROV:-$ROOT/c/build}
FT=${FT:-/work/fabtests-suite/bin}
ITERS=${ITERS:-20000}
D=$(mktemp -d /tmp/fastpath-rdm-rate.XXXX)
$BIN/iwarpd -socket $D/a.sock -ud-ports 39300-39349 -rd-ports 39350-39399 -log-level warn >$D/a.log 2>&1 &
A=$!
$BIN/iwarpd -socket $D/b.sock -ud-ports 39400-39449 -rd-ports 39450-39499 -log-level warn >$D/b.log 2>&1 &
B=$!
trap 'kill $A $B 2>/dev/null; wait $A $B 2>/dev/null; rm -rf $D' EXIT
sleep 0.5
port=48100
for cfg in "iwarpd FI_PROVIDER=^ofi_rxm,ofi_rxd" "iwarpd FI_PROVIDER=^ofi_rxm,ofi_rxd FI_IWARPD_FASTPATH_RDM=0" "tcp FI_PROVIDER=tcp"; do
	set -- $cfg
	prov=$1 port=$((port + 1))
	shift
	env FI_PROVIDER_PATH=$PROV FI_IWARPD_SOCKET=$D/a.sock FI_LOG_LEVEL=info FI_LOG_PROV=iwarpd "$@" \
		timeout 30 $FT/fi_rdm_tagged_bw -p $prov -S 8 -W 64 -I $ITERS -B $port >$D/bsrv.out 2>$D/bsrv.err &
	s=$!
	sleep 0.3
	env FI_PROVIDER_PATH=$PROV FI_IWARPD_SOCKET=$D/b.sock FI_LOG_LEVEL=info FI_LOG_PROV=iwarpd "$@" \
		timeout 30 $FT/fi_rdm_tagged_bw -p $prov -S 8 -W 64 -I $ITERS -P $port 127.0.0.1 >$D/bcli.out 2>$D/bcli.err
	wait $s
	echo "== $cfg: $(grep -E '^ *8 ' $D/bcli.out || tail -c 300 $D/bcli.err)"
	grep -h "RDM fast path: .* sends" $D/bcli.err $D/bsrv.err | sed 's/.*RDM fast path/  /'
done
