#!/bin/bash
# mpi-rma-count.sh: what one small one-sided MPI operation costs each process
# (docs/mpi.md "Where a small RMA operation's time goes"). Runs one
# iwarp-bench MPI job over iwarpd+btl (osc rdma over btl ofi), attaches
# `perf stat --per-thread` to its two daemons and two ranks for SECONDS once
# the ranks run, and prints per network round trip (one datagram sent by
# each daemon's engine: a put's Write-Record and its ACK, a get's Read
# Request and Response, one atomic and its response) the system calls and
# context switches of each thread that made any.
#
#   make build
#   flock /tmp/iwarpd-test.lock scripts/mpi-rma-count.sh DIR put:8 [SECONDS] [more iwarp-bench flags]
#
# TEST is an iwmpi_bench spec without its count (put:8, get:8, fop:8,
# fopx:8); an MPI_Fetch_and_op under a shared lock is three round trips.
# The job runs -mpi-scale 40 so that its timed loop outlasts the window.
# Needs perf (perf_event_paranoid <= 1 or root) and Open MPI as the MPI
# section does. DIR keeps bench.txt and perf.txt.
set -euo pipefail
cd "$(dirname "$0")/.."
out=$1
test=$2
secs=${3:-2}
shift 2
[ $# -gt 0 ] && shift
mkdir -p "$out"
desc() { local p; for p in $(pgrep -P "$1"); do echo "$p"; desc "$p"; done; }
./bin/iwarp-bench -bin bin -scenario mpi -mpi-rounds 1 -mpi-mem-ranks '' -mpi-layouts shared -mpi-load 0 \
	-mpi-transports iwarpd+btl -mpi-tests "$test" -mpi-scale 40 -out '' "$@" >"$out/bench.txt" 2>&1 &
bench=$!
ranks=""
for _ in $(seq 1 600); do
	ranks=$(for p in $(desc $bench); do [ "$(cat /proc/"$p"/comm 2>/dev/null)" = iwmpi_bench ] && echo "$p"; done || true)
	[ -n "$ranks" ] && break
	sleep 0.1
done
if [ -z "$ranks" ]; then
	wait $bench || true
	echo "mpi-rma-count: the ranks never started; see $out/bench.txt" >&2
	exit 1
fi
sleep 1.5 # MPI_Init, the window, the warm-up
pids=""
for p in $(desc $bench); do
	case "$(cat /proc/"$p"/comm 2>/dev/null)" in iwarpd | iwmpi_bench) pids="$pids,$p" ;; esac
done
timeout -s INT "$secs" perf stat --per-thread -o "$out/perf.txt" -p "${pids#,}" -e context-switches \
	-e 'syscalls:sys_enter_sendmmsg,syscalls:sys_enter_recvmmsg,syscalls:sys_enter_sched_yield' \
	-e 'syscalls:sys_enter_nanosleep,syscalls:sys_enter_clock_nanosleep,syscalls:sys_enter_epoll_pwait' \
	-e 'syscalls:sys_enter_epoll_pwait2,syscalls:sys_enter_write,syscalls:sys_enter_poll' || true
wait $bench || true
grep '^\[mpi\] shared round' "$out/bench.txt" || true
awk '
$2 ~ /^[0-9]+$/ && $3 != "" {
	ev = $3; sub(/^syscalls:sys_enter_/, "", ev)
	n[$1, ev] = $2; threads[$1] = 1; evs[ev] = 1
	if (ev == "sendmmsg" && $1 ~ /^iwarpd-/ && $2 > 0 && (rt == 0 || $2 < rt)) rt = $2
}
END {
	if (rt == 0) { print "mpi-rma-count: no engine sent in the window"; exit 1 }
	printf "%d round trips in the window; per round trip:\n", rt
	for (t in threads) {
		if (n[t, "context-switches"] < rt / 10) continue # a thread of the daemon that is not its engine
		line = ""
		for (ev in evs) if (n[t, ev] >= rt / 100) line = line sprintf("  %s %.2f", ev, n[t, ev] / rt)
		printf "%-22s%s\n", t, line | "sort"
	}
}' "$out/perf.txt"
