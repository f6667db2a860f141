#!/bin/sh
# Runs the small-message prototype (smallmsg.c) for every design in both
# layouts of the MPI benchmark, ROUNDS interleaved rounds, and prints each
# figure with its ratio to the tcp ping-pong of the same round and layout.
# Binds loopback ports: run it under the test lock, e.g.
#   flock /tmp/iwarpd-test.lock timeout -s KILL 330 bench/proto-smallmsg/run.sh
# Environment: ROUNDS (1), N (latency round trips per rep, 10000), RN
# (rate windows of 64 per rep, 300), LAYOUTS ("shared engine"), DESIGNS.
set -e
here=$(dirname "$0")
bin=${SMALLMSG:-/tmp/smallmsg-$$}
cc -std=gnu11 -O2 -Wall -Wextra -Werror -Wshadow -Wstrict-prototypes -Wmissing-prototypes -o "$bin" "$here/smallmsg.c"
ROUNDS=${ROUNDS:-1}
N=${N:-10000}
RN=${RN:-300}
LAYOUTS=${LAYOUTS:-"shared engine"}
DESIGNS=${DESIGNS:-"t u a a-recv d d-rwin20 b c c-ackdrain"}

args() { # design -> smallmsg flags
	case $1 in
	t) echo "-mode t" ;;
	u) echo "-mode u" ;;
	a) echo "-mode a" ;;
	a-recv) echo "-mode a -dpoll recv" ;;
	d) echo "-mode d -rwin 0" ;;
	d-rwin20) echo "-mode d -rwin 20" ;;
	d-norank) echo "-mode d" ;;
	b) echo "-mode b" ;;
	c) echo "-mode c" ;;
	c-ackdrain) echo "-mode c -ackdrain" ;;
	esac
}
cpus() { # layout -> -cpus rankA,daemonA,rankB,daemonB
	case $1 in
	shared) echo "-1,-1,-1,-1" ;;
	engine) echo "0,1,0,1" ;; # both daemons on CPU 1, both ranks on CPU 0
	node) echo "0,0,1,1" ;;
	esac
}
r=1
while [ "$r" -le "$ROUNDS" ]; do
	for L in $LAYOUTS; do
		for metric in lat rate; do
			extra="-n $N -reps 3"
			[ "$metric" = rate ] && extra="-rate -n $RN -reps 3"
			base=""
			for D in $DESIGNS; do
				# d's blocking waits lose a wake-up under a window of sends
				# (the run is killed at 60 s): latency only.
				case "$metric$D" in rated*) continue ;; esac
				v=$(timeout -s KILL 60 "$bin" $(args "$D") -cpus "$(cpus "$L")" $extra | cut -d' ' -f1)
				[ -z "$base" ] && base=$v
				ratio=$(awk -v a="$v" -v b="$base" 'BEGIN { if (a == "" || b == "") print "-"; else printf "%.2f", a / b }')
				echo "round $r layout $L $metric $D $v ratio_to_tcp $ratio"
			done
		done
	done
	r=$((r + 1))
done
rm -f "$bin"
