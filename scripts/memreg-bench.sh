#!/bin/bash
# memreg-bench.sh: memfd regions against process-memory regions
# (docs/memory-registration.md). Two daemons on loopback; for UD, RD and RC,
# ping-pong latency and streaming bandwidth at 64 B, 4 KiB, 64 KiB, 1 MiB,
# each size run with -mem memfd then -mem user in the same run; prints the
# figures and the ratio user/memfd (latency: median; bandwidth: average).
#
#   go build -o bin/ ./cmd/iwarpd ./cmd/iwarp-perf
#   scripts/memreg-bench.sh [BIN_DIR]      (default bin)
#
# Ports: UD 31000-31149, RD 31050-31199 (two blocks each), out-of-band TCP
# 18700-18799: run it alone (no test suite beside it).
set -u
B=$(cd "${1:-bin}" && pwd)
W=$(mktemp -d)
trap 'kill $A $BB 2>/dev/null; wait 2>/dev/null; rm -rf "$W"' EXIT
"$B/iwarpd" -socket "$W/a.sock" -ud-ports 31000-31049 -rd-ports 31050-31099 -log-level warn & A=$!
"$B/iwarpd" -socket "$W/b.sock" -ud-ports 31100-31149 -rd-ports 31150-31199 -log-level warn & BB=$!
sleep 1
port=18700
for t in ud rd rc; do
 for m in lat bw; do
  for s in 64 4096 65536 1048576; do
   for mem in memfd user; do
    n=2000; [ $m = lat ] && n=1000; [ $s -ge 65536 ] && n=300; [ $s -ge 1048576 ] && n=100
    w=64; [ $s -ge 1048576 ] && w=8
    port=$((port+1))
    "$B/iwarp-perf" -socket "$W/b.sock" -t $t -m $m -s $s -n $n -window $w -mem $mem -p $port -json > "$W/srv.json" 2>"$W/srv.err" &
    S=$!
    "$B/iwarp-perf" -socket "$W/a.sock" -t $t -m $m -s $s -n $n -window $w -mem $mem -p $port -json 127.0.0.1 \
      > "$W/$t-$m-$s-$mem.json" 2>"$W/cli.err" || echo "$t $m $s $mem: FAILED: $(head -c 300 "$W/cli.err")" >&2
    wait $S
   done
  done
 done
done
python3 - "$W" <<'PY'
import json, os, sys
d = sys.argv[1]
def val(t, m, s, mem):
    try:
        r = json.load(open(os.path.join(d, f"{t}-{m}-{s}-{mem}.json")))["results"][0]
    except Exception:
        return None
    return r["latency"]["median_us"] if m == "lat" else r["bandwidth"]["avg_gbps"]
print("| type | test | size | memfd | user (process memory) | user/memfd |")
print("|---|---|---:|---:|---:|---:|")
for t in ("ud", "rd", "rc"):
    for m in ("lat", "bw"):
        for s in (64, 4096, 65536, 1048576):
            a, b = val(t, m, s, "memfd"), val(t, m, s, "user")
            unit = "µs median" if m == "lat" else "Gb/s"
            f = lambda v: "failed" if v is None else f"{v:.2f}"
            ratio = "" if a is None or b is None or a == 0 else f"{b / a:.2f}"
            print(f"| {t.upper()} | {m} | {s} | {f(a)} {unit} | {f(b)} | {ratio} |")
PY
