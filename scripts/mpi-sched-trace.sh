#!/bin/bash
# mpi-sched-trace.sh: where the MPI section's processes run (docs/benchmarks.md,
# "MPI large messages", item 8). Runs one iwarp-bench MPI job under a
# system-wide perf trace of sched_switch and sendmmsg, then prints, for the
# steady part of the run (the 10th to 90th percentile of the daemons'
# sendmmsg calls), each thread's share of each CPU and how much of the
# daemons' time on a CPU was slices that sent or received nothing (yield
# passes).
#
#   make build
#   flock /tmp/iwarpd-test.lock scripts/mpi-sched-trace.sh DIR \
#       -mpi-tests bw:1048576 -mpi-scale 10 [more iwarp-bench flags]
#
# Needs perf (perf_event_paranoid <= 1 or root) and Open MPI as the MPI
# section does. DIR keeps sched.data and sched.txt.
set -euo pipefail
cd "$(dirname "$0")/.."
out=$1
shift
mkdir -p "$out"
perf record -q -e sched:sched_switch,syscalls:sys_enter_sendmmsg,syscalls:sys_enter_recvmmsg -a \
	-o "$out/sched.data" -- ./bin/iwarp-bench -bin bin -scenario mpi -mpi-rounds 1 -mpi-mem-ranks '' \
	-mpi-transports iwarpd -mpi-layouts shared -mpi-load 0 -out '' "$@" 2>&1 | grep '^\[mpi\] [a-z-]* round' || true
perf script -i "$out/sched.data" -F comm,tid,cpu,time,event,trace 2>/dev/null >"$out/sched.txt"
# The steady window: percentiles of the iwarpd sendmmsg timestamps.
read -r t0 t1 < <(awk '$1 == "iwarpd" && /sys_enter_sendmmsg/ { sub(":", "", $4); print $4 }' "$out/sched.txt" |
	sort -n | awk '{ t[NR] = $1 } END { if (NR < 10) exit 1; print t[int(NR / 10)], t[int(NR * 9 / 10)] }')
awk -v t0="$t0" -v t1="$t1" '
function close_slice(cpu, t) {
	if (!(cpu in who)) return
	run[who[cpu] " cpu" cpu] += t - since[cpu]
	if (who[cpu] ~ /^iwarpd:/) { if (io[cpu]) busy += t - since[cpu]; else idle += t - since[cpu] }
}
{
	t = $4; sub(":", "", t); t += 0
	if (t < t0 || t > t1) next
	cpu = $3; gsub(/[\[\]]/, "", cpu); cpu += 0
	if ($5 == "sched:sched_switch:") {
		close_slice(cpu, t)
		n = ""; p = ""
		for (i = 6; i <= NF; i++) { if ($i ~ /^next_comm=/) n = substr($i, 11); if ($i ~ /^next_pid=/) p = substr($i, 10) }
		who[cpu] = n ":" p; since[cpu] = t; io[cpu] = 0
	} else if ($5 ~ /mmsg/) io[cpu] = 1
}
END {
	w = t1 - t0
	printf "steady window %.3f s\n", w
	for (k in run) printf "%6.1f%%  %s\n", 100 * run[k] / w, k | "sort -rn | head -12"
	close("sort -rn | head -12")
	printf "daemon slices that sent or received: %.1f%% of a CPU; that did neither: %.1f%%\n", 100 * busy / w, 100 * idle / w
}' "$out/sched.txt"
