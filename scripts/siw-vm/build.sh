#!/usr/bin/env bash
# build.sh — build a small qemu guest that runs Linux SoftiWARP (siw), for
# iwarpd interoperability tests. Idempotent: every step leaves a stamp in the
# cache and is skipped when its stamp exists (delete the stamp, or the whole
# cache, to redo it).
#
# Result (under $IWARPD_SIW_VM_CACHE, default /var/cache/iwarpd-siw-vm):
#   out/vmlinuz      Debian's 6.1 kernel (linux-image-6.1.0-N-amd64)
#   out/initrd.cpio  initramfs: busybox, rdma-core tools (rping, rdma,
#                    ibv_devinfo, ...), tcpdump, the kernel's rdma and virtio
#                    modules, and siw.ko built from Debian's linux-source-6.1
#   out/siw.ko       the module (also inside the initramfs)
#   out/KVER         the kernel release, e.g. 6.1.0-56-amd64
#
# Everything is built inside a debootstrap chroot under the cache; the host
# only gets qemu-system-x86 and debootstrap. No kernel is installed on the host.
#
# Environment:
#   IWARPD_SIW_VM_CACHE   cache directory (default /var/cache/iwarpd-siw-vm)
#   IWARPD_SIW_KVER       kernel release to use (default: the newest
#                         linux-image-6.1.0-N-amd64 with matching headers)
#   IWARPD_SIW_MIRROR     Debian mirror (default: the one in /etc/apt/sources.list*)
#   IWARPD_SIW_SECMIRROR  Debian security mirror (default: likewise)
#   IWARPD_SIW_SKIP_HOST_DEPS=1  do not apt-get install on the host
set -euo pipefail

CACHE=${IWARPD_SIW_VM_CACHE:-/var/cache/iwarpd-siw-vm}
ROOT=$CACHE/root
OUT=$CACHE/out
STAMPS=$CACHE/stamps
HERE=$(cd "$(dirname "$0")" && pwd)
export DEBIAN_FRONTEND=noninteractive LC_ALL=C

log() { printf '[siw-vm build %(%H:%M:%S)T] %s\n' -1 "$*" >&2; }
die() { log "error: $*"; exit 1; }
done_step() { [ -e "$STAMPS/$1" ]; }
mark() { touch "$STAMPS/$1"; }

[ "$(id -u)" = 0 ] || die "must run as root (debootstrap and chroot)"
mkdir -p "$CACHE" "$OUT" "$STAMPS"

# mirror_for SUITE: the URI apt on this host uses for SUITE (deb822 or
# one-line format), so the chroot talks to the same mirror as the host.
mirror_for() {
	local suite=$1 f
	for f in /etc/apt/sources.list /etc/apt/sources.list.d/*.list; do
		[ -r "$f" ] || continue
		awk -v s="$suite" '$1=="deb" { for (i=2;i<=NF;i++) if ($i ~ /^[a-z]+:\/\//) { if ($(i+1)==s) { print $i; exit } break } }' "$f"
	done | head -n1
	for f in /etc/apt/sources.list.d/*.sources; do
		[ -r "$f" ] || continue
		awk -v s="$suite" '
			/^[ \t]*$/ { if (u != "" && has) { print u; exit } u=""; has=0; next }
			/^URIs:/ { u=$2 }
			/^Suites:/ { for (i=2;i<=NF;i++) if ($i==s) has=1 }
			END { if (u != "" && has) print u }' "$f"
	done | head -n1
}
MIRROR=${IWARPD_SIW_MIRROR:-$(mirror_for bookworm | head -n1)}
SECMIRROR=${IWARPD_SIW_SECMIRROR:-$(mirror_for bookworm-security | head -n1)}
MIRROR=${MIRROR:-http://deb.debian.org/debian}
SECMIRROR=${SECMIRROR:-http://deb.debian.org/debian-security}

# --- 1. host tools -----------------------------------------------------------
if [ "${IWARPD_SIW_SKIP_HOST_DEPS:-0}" != 1 ]; then
	need=()
	command -v qemu-system-x86_64 >/dev/null || need+=(qemu-system-x86)
	command -v debootstrap >/dev/null || need+=(debootstrap)
	if [ ${#need[@]} -gt 0 ]; then
		log "host: apt-get install ${need[*]}"
		apt-get update -qq
		apt-get install -y -qq --no-install-recommends "${need[@]}"
	fi
fi
command -v debootstrap >/dev/null || die "debootstrap missing"

# --- 2. chroot ---------------------------------------------------------------
if ! done_step debootstrap; then
	log "debootstrap bookworm (minbase) from $MIRROR into $ROOT"
	rm -rf "$ROOT"
	debootstrap --variant=minbase bookworm "$ROOT" "$MIRROR"
	mark debootstrap
fi

mounted=0
cleanup() {
	if [ "$mounted" = 1 ]; then umount "$ROOT/proc" 2>/dev/null || true; fi
}
trap cleanup EXIT
if ! mountpoint -q "$ROOT/proc"; then
	mount -t proc proc "$ROOT/proc"
	mounted=1
fi
inroot() { chroot "$ROOT" /usr/bin/env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin HOME=/root LC_ALL=C DEBIAN_FRONTEND=noninteractive "$@"; }

if ! done_step packages; then
	log "chroot: apt sources and packages"
	cat >"$ROOT/etc/apt/sources.list" <<EOF
deb $MIRROR bookworm main
deb $MIRROR bookworm-updates main
deb $SECMIRROR bookworm-security main
EOF
	# No daemons start inside the chroot.
	printf '#!/bin/sh\nexit 101\n' >"$ROOT/usr/sbin/policy-rc.d"
	chmod +x "$ROOT/usr/sbin/policy-rc.d"
	inroot apt-get update -qq
	inroot apt-get install -y -qq --no-install-recommends \
		rdma-core ibverbs-utils rdmacm-utils ibverbs-providers iproute2 kmod \
		tcpdump busybox-static cpio xz-utils make gcc linux-source-6.1
	mark packages
fi

# --- 3. kernel: image + headers pair ------------------------------------------
if [ -s "$OUT/KVER" ] && done_step kernel; then
	KVER=$(cat "$OUT/KVER")
else
	KVER=${IWARPD_SIW_KVER:-}
	if [ -z "$KVER" ]; then
		for n in $(inroot apt-cache pkgnames linux-image-6.1.0- | sed -n 's/^linux-image-6\.1\.0-\([0-9]*\)-amd64$/\1/p' | sort -rn); do
			if inroot apt-cache show "linux-headers-6.1.0-$n-amd64" >/dev/null 2>&1; then
				KVER=6.1.0-$n-amd64
				break
			fi
		done
	fi
	[ -n "$KVER" ] || die "no linux-image-6.1.0-N-amd64 with matching headers found"
	log "kernel $KVER: headers into the chroot, image extracted with dpkg-deb -x"
	inroot apt-get install -y -qq --no-install-recommends "linux-headers-$KVER"
	rm -rf "$ROOT/build/kernel" && mkdir -p "$ROOT/build/kernel"
	(cd "$ROOT/build" && inroot sh -c "cd /build && apt-get download linux-image-$KVER")
	deb=$(ls "$ROOT"/build/linux-image-"$KVER"_*.deb | head -n1)
	inroot dpkg-deb -x "/build/$(basename "$deb")" /build/kernel
	inroot depmod -b /build/kernel "$KVER"
	cp "$ROOT/build/kernel/boot/vmlinuz-$KVER" "$OUT/vmlinuz"
	echo "$KVER" >"$OUT/KVER"
	rm -f "$STAMPS/siw" "$STAMPS/initrd"
	mark kernel
fi
log "kernel release $KVER"

# --- 4. siw.ko out of tree ------------------------------------------------------
if ! done_step siw || [ "$HERE/patch-siw-params.sh" -nt "$OUT/siw.ko" ] || [ "$HERE/patch-siw-accept.sh" -nt "$OUT/siw.ko" ]; then
	log "building siw.ko from linux-source-6.1 against linux-headers-$KVER"
	rm -rf "$ROOT/build/siw" && mkdir -p "$ROOT/build/siw"
	tarball=$(ls "$ROOT"/usr/src/linux-source-6.1.tar.* | head -n1)
	inroot tar -C /build/siw --strip-components=5 -xf "/usr/src/$(basename "$tarball")" \
		linux-source-6.1/drivers/infiniband/sw/siw
	"$HERE/patch-siw-params.sh" "$ROOT/build/siw"
	"$HERE/patch-siw-accept.sh" "$ROOT/build/siw"
	inroot make -s -C "/usr/src/linux-headers-$KVER" M=/build/siw CONFIG_RDMA_SIW=m modules
	inroot modinfo /build/siw/siw.ko | grep -E '^(vermagic|parm)' >&2
	cp "$ROOT/build/siw/siw.ko" "$OUT/siw.ko"
	rm -f "$STAMPS/initrd"
	mark siw
fi

# --- 5. initramfs -----------------------------------------------------------------
if ! done_step initrd || [ "$HERE/init" -nt "$OUT/initrd.cpio" ] || [ "$HERE/mkinitrd.sh" -nt "$OUT/initrd.cpio" ]; then
	log "assembling initramfs"
	cp "$HERE/init" "$ROOT/build/init"
	cp "$HERE/mkinitrd.sh" "$ROOT/build/mkinitrd.sh"
	inroot sh /build/mkinitrd.sh "$KVER" /build/stage /build/initrd.cpio
	cp "$ROOT/build/initrd.cpio" "$OUT/initrd.cpio"
	mark initrd
fi

log "done: $(du -h "$OUT/vmlinuz" "$OUT/initrd.cpio" | tr '\n' ' ')"
