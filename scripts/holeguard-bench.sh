#!/bin/bash
# holeguard-bench.sh: write bandwidth of well-behaved (populated) memfd
# memory with two builds, alternating in one run (docs/memory-registration.md
# "Measured: the hole guard"): RC RDMA Write (64 KiB, 1 MiB) and UD
# Write-Record (64 KiB), ROUNDS rounds, fresh daemons for every run; prints
# each run (Gb/s and the receiving daemon's minor page faults during it,
# /proc/PID/stat) and the medians with the ratio B/A.
#
#   git archive BASE | tar -x -C /tmp/base && (cd /tmp/base && go build -o /tmp/a/ ./cmd/iwarpd ./cmd/iwarp-perf)
#   go build -o bin/ ./cmd/iwarpd ./cmd/iwarp-perf
#   flock /tmp/iwarpd-test.lock scripts/holeguard-bench.sh /tmp/a bin [ROUNDS]
#
# Ports: UD 45000-45199, out-of-band TCP 18900-: run it alone.
set -u
A_BIN=$(cd "$1" && pwd) B_BIN=$(cd "$2" && pwd) ROUNDS=${3:-5}
W=$(mktemp -d)
trap 'rm -rf "$W"' EXIT
port=18900
minflt() { awk '{print $10}' /proc/$1/stat; }
run() { # bin-dir type op size
  local B=$1 t=$2 o=$3 s=$4 n=3000 w=64
  [ $s -ge 1048576 ] && n=300 && w=8
  "$B/iwarpd" -socket "$W/a.sock" -ud-ports 45000-45049 -rd-ports 45050-45099 -log-level warn & local A=$!
  "$B/iwarpd" -socket "$W/b.sock" -ud-ports 45100-45149 -rd-ports 45150-45199 -log-level warn & local BB=$!
  sleep 0.7
  port=$((port+1))
  "$B/iwarp-perf" -socket "$W/b.sock" -t $t -o $o -m bw -s $s -n $n -window $w -p $port -json > "$W/srv.json" 2>"$W/srv.err" &
  local S=$!
  sleep 0.3
  local f0=$(minflt $BB)
  "$B/iwarp-perf" -socket "$W/a.sock" -t $t -o $o -m bw -s $s -n $n -window $w -p $port -json 127.0.0.1 > "$W/cli.json" 2>"$W/cli.err"
  wait $S
  local f1=$(minflt $BB)
  kill $A $BB; wait $A $BB 2>/dev/null
  local bw=$(python3 -c 'import json,sys; print("%.2f" % json.load(open(sys.argv[1]))["results"][0]["bandwidth"]["avg_gbps"])' "$W/cli.json" 2>/dev/null || echo "FAIL")
  echo "$bw $((f1-f0))"
}
for round in $(seq 1 $ROUNDS); do
  for case in "rc write 65536" "rc write 1048576" "ud write-record 65536"; do
    set -- $case
    echo "$1 $2 $3 A $(run "$A_BIN" $1 $2 $3) B $(run "$B_BIN" $1 $2 $3)" | tee -a "$W/runs"
  done
done
python3 - "$W/runs" <<'PY'
import statistics, sys
rows = {}
for line in open(sys.argv[1]):
    t, o, s, _, abw, af, _, bbw, bf = line.split()
    r = rows.setdefault((t, o, int(s)), ([], [], [], []))
    for lst, v in zip(r, (abw, bbw, af, bf)):
        if v != "FAIL":
            lst.append(float(v))
print("| test | size | A Gb/s | B Gb/s | B/A | minor faults A / B |")
print("|---|---:|---:|---:|---:|---:|")
for (t, o, s), (a, b, fa, fb) in rows.items():
    m = lambda l: statistics.median(l) if l else float("nan")
    print(f"| {t.upper()} {o} | {s} | {m(a):.2f} | {m(b):.2f} | {m(b)/m(a):.2f} | {m(fa):.0f} / {m(fb):.0f} |")
PY
