#!/usr/bin/env bash
# run.sh [options] CMD... — boot the siw guest built by build.sh under qemu
# (TCG), run CMD (a shell command line) in it, print the serial log, power off.
# Exit status: CMD's exit status in the guest; 124 on timeout; 125 when the
# guest never reported one (boot failure, setup error).
#
# Options:
#   -t SECONDS     kill qemu after SECONDS (default 180)
#   -f [udp:]H:G   forward host 127.0.0.1:H to guest port G (repeatable)
#   -p NAME=VALUE  siw module parameter (repeatable): mpa_version=1|2,
#                  mpa_crc_required=0|1, mpa_crc_strict=0|1, peer_to_peer=0|1,
#                  try_gso=0|1, siw_tcp_nagle=0|1, relaxed_ird_negotiation=0|1
#   -s DIR         share host DIR read-write with the guest at /host (9p)
#   -a FILE[:PATH] copy a host file into the guest (default /iwarp/files/NAME)
#   -l LOGFILE     also write the serial log to LOGFILE
#   -m MB          guest memory (default 1024)
#   -c CPUS        guest CPUs (default 1; each costs a host core under TCG)
#   -v             verbose kernel console (no "quiet")
#   -q             do not copy the serial log to stdout (use with -l)
# CMD "-" reads the script from standard input.
#
# Inside the guest: eth0 = 10.0.2.15/24, the host's loopback is 10.0.2.2
# (slirp), siw0 sits on eth0, and rping/ucmatose/rdma/tcpdump/ip are on PATH.
# `iwarp-emit FILE` copies a guest file into the serial log as base64.
#
# Environment: IWARPD_SIW_VM_CACHE (default /var/cache/iwarpd-siw-vm),
# QEMU (default qemu-system-x86_64).
set -euo pipefail

CACHE=${IWARPD_SIW_VM_CACHE:-/var/cache/iwarpd-siw-vm}
OUT=$CACHE/out
QEMU=${QEMU:-qemu-system-x86_64}
timeout_s=180 mem=1024 cpus=1 share="" logfile="" quiet=quiet tostdout=1
fwds=() params=() adds=()

usage() { sed -n '2,/^set -e/p' "$0" | sed 's/^# \{0,1\}//; /^set -e/d' >&2; exit 2; }
while getopts "t:f:p:s:a:l:m:c:vqh" o; do
	case $o in
	t) timeout_s=$OPTARG ;;
	f) fwds+=("$OPTARG") ;;
	p) params+=("$OPTARG") ;;
	s) share=$OPTARG ;;
	a) adds+=("$OPTARG") ;;
	l) logfile=$OPTARG ;;
	m) mem=$OPTARG ;;
	c) cpus=$OPTARG ;;
	v) quiet="" ;;
	q) tostdout=0 ;;
	*) usage ;;
	esac
done
shift $((OPTIND - 1))
[ $# -gt 0 ] || usage

for f in vmlinuz initrd.cpio; do
	[ -s "$OUT/$f" ] || { echo "run.sh: $OUT/$f missing: run scripts/siw-vm/build.sh first" >&2; exit 125; }
done
command -v "$QEMU" >/dev/null || { echo "run.sh: $QEMU not found" >&2; exit 125; }
BUSYBOX=$CACHE/root/bin/busybox
[ -x "$BUSYBOX" ] || { echo "run.sh: $BUSYBOX missing (build.sh)" >&2; exit 125; }

work=$(mktemp -d "${TMPDIR:-/tmp}/siw-vm.XXXXXX")
qpid=""
cleanup() {
	if [ -n "$qpid" ]; then kill "$qpid" 2>/dev/null || true; fi
	rm -rf "$work"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# Per-run files go into a second cpio archive appended to the initramfs
# (the kernel unpacks concatenated archives in order).
mkdir -p "$work/x/iwarp/files"
if [ "$*" = "-" ]; then cat >"$work/x/iwarp/cmd.sh"; else printf '%s\n' "$*" >"$work/x/iwarp/cmd.sh"; fi
for p in "${params[@]}"; do
	case $p in
	*[!A-Za-z0-9_=]*) echo "run.sh: bad siw parameter '$p'" >&2; exit 2 ;;
	*=*) printf '%s ' "$p" >>"$work/x/iwarp/siw.params" ;;
	*) echo "run.sh: siw parameter '$p' is not NAME=VALUE" >&2; exit 2 ;;
	esac
done
for a in "${adds[@]}"; do
	src=${a%%:*}
	dst=/iwarp/files/$(basename "$src")
	[ "$a" != "$src" ] && dst=${a#*:}
	mkdir -p "$work/x$(dirname "$dst")"
	cp -L "$src" "$work/x$dst"
done
netdev="user,id=n0"
for f in "${fwds[@]}"; do
	proto=tcp
	case $f in udp:*) proto=udp f=${f#udp:} ;; tcp:*) f=${f#tcp:} ;; esac
	netdev+=",hostfwd=$proto:127.0.0.1:${f%%:*}-:${f#*:}"
done
virtfs=()
if [ -n "$share" ]; then
	[ -d "$share" ] || { echo "run.sh: share $share is not a directory" >&2; exit 2; }
	: >"$work/x/iwarp/share"
	virtfs=(-virtfs "local,path=$(cd "$share" && pwd),mount_tag=host,security_model=none,id=host")
fi
(cd "$work/x" && find . | "$BUSYBOX" cpio -o -H newc 2>/dev/null) >"$work/extra.cpio"
cat "$OUT/initrd.cpio" "$work/extra.cpio" >"$work/initrd"

log=$work/serial.log
[ -n "$logfile" ] && log=$logfile
: >"$log"
append="console=ttyS0 $quiet loglevel=4 panic=-1 rdinit=/init mitigations=off random.trust_cpu=on"

"$QEMU" -accel tcg -m "$mem" -smp "$cpus" -nodefaults -display none -no-reboot \
	-serial "file:$log" -monitor none \
	-kernel "$OUT/vmlinuz" -initrd "$work/initrd" -append "$append" \
	-netdev "$netdev" -device virtio-net-pci,netdev=n0 \
	"${virtfs[@]}" </dev/null >"$work/qemu.out" 2>&1 &
qpid=$!

tailpid=""
if [ "$tostdout" = 1 ]; then
	tail -n +1 -f "$log" --pid="$qpid" &
	tailpid=$!
fi
deadline=$((SECONDS + timeout_s))
timed_out=0
while kill -0 "$qpid" 2>/dev/null; do
	if [ $SECONDS -ge $deadline ]; then
		timed_out=1
		kill "$qpid" 2>/dev/null || true
		sleep 1
		kill -9 "$qpid" 2>/dev/null || true
		break
	fi
	sleep 0.2
done
wait "$qpid" 2>/dev/null || true
qpid=""
[ -n "$tailpid" ] && wait "$tailpid" 2>/dev/null || true
if [ -s "$work/qemu.out" ]; then sed 's/^/run.sh: qemu: /' "$work/qemu.out" >&2; fi

if [ $timed_out = 1 ]; then
	echo "run.sh: timeout after ${timeout_s}s, qemu killed" >&2
	exit 124
fi
rc=$(sed -n 's/^iwarp-siw-vm: exit \([0-9]*\).*/\1/p' "$log" | tail -n1 | tr -d '\r')
if [ -z "$rc" ]; then
	echo "run.sh: guest reported no exit status" >&2
	exit 125
fi
exit "$rc"
