#!/bin/sh
# mkinitrd.sh KVER STAGE OUT — run INSIDE the build chroot by build.sh.
# Assembles a small initramfs (uncompressed newc cpio) from the chroot's own
# files: busybox-static, rdma-core user tools with the siw verbs provider,
# iproute2 (ip, rdma), tcpdump, kmod, and just the kernel modules the guest
# needs (closure over dependencies) plus /build/siw/siw.ko.
# Layout is merged-/usr like Debian bookworm.
set -eu
KVER=$1
STAGE=$2
OUT=$3
KROOT=/build/kernel
MODDIR=$KROOT/lib/modules/$KVER

rm -rf "$STAGE"
mkdir -p "$STAGE"/usr/bin "$STAGE"/usr/sbin "$STAGE"/usr/lib/x86_64-linux-gnu "$STAGE"/usr/lib64 \
	"$STAGE"/etc "$STAGE"/dev "$STAGE"/proc "$STAGE"/sys "$STAGE"/tmp "$STAGE"/run "$STAGE"/root \
	"$STAGE"/host "$STAGE"/iwarp "$STAGE"/var/run
ln -s usr/bin "$STAGE/bin"
ln -s usr/sbin "$STAGE/sbin"
ln -s usr/lib "$STAGE/lib"
ln -s usr/lib64 "$STAGE/lib64"
mknod -m 600 "$STAGE/dev/console" c 5 1
mknod -m 666 "$STAGE/dev/null" c 1 3

# copy_file PATH: copy PATH (following symlinks) to the same path in STAGE.
copy_file() {
	p=$1
	case $p in /lib/* | /lib64/* | /bin/* | /sbin/*) p=/usr$p ;; esac
	[ -e "$STAGE$p" ] && return 0
	mkdir -p "$STAGE$(dirname "$p")"
	cp -L "$1" "$STAGE$p"
}
# copy_elf PATH: the file and every shared library ldd resolves for it.
copy_elf() {
	copy_file "$1"
	ldd "$1" 2>/dev/null | awk '/=> \// { print $3 } /^[ \t]*\/[^ ]*ld-linux/ { print $1 }' | while read -r lib; do
		copy_file "$lib"
	done
}

# User space.
for b in rping ucmatose udaddy rdma_server rdma_client riostream rstream \
	ibv_devices ibv_devinfo rdma ip tcpdump kmod; do
	p=$(command -v "$b") || { echo "mkinitrd: $b not found" >&2; exit 1; }
	copy_elf "$p"
done
for l in modprobe insmod rmmod lsmod modinfo depmod; do
	ln -sf kmod "$STAGE/usr/bin/$l"
done
# glibc dlopens libgcc_s for pthread_exit/cancellation (rping's threads).
copy_file /usr/lib/x86_64-linux-gnu/libgcc_s.so.1
# libibverbs: only the siw provider.
prov=$(ls /usr/lib/x86_64-linux-gnu/libibverbs/libsiw-rdmav*.so | head -n1)
copy_elf "$prov"
mkdir -p "$STAGE/etc/libibverbs.d"
cp /etc/libibverbs.d/siw.driver "$STAGE/etc/libibverbs.d/"
# busybox applets for everything not copied above.
cp /bin/busybox "$STAGE/usr/bin/busybox"
/bin/busybox --list | while read -r a; do
	[ -e "$STAGE/usr/bin/$a" ] || [ -e "$STAGE/usr/sbin/$a" ] || ln -s busybox "$STAGE/usr/bin/$a"
done

cat >"$STAGE/etc/passwd" <<'EOF'
root:x:0:0:root:/root:/bin/sh
tcpdump:x:104:108::/nonexistent:/usr/sbin/nologin
nobody:x:65534:65534:nobody:/nonexistent:/usr/sbin/nologin
EOF
cat >"$STAGE/etc/group" <<'EOF'
root:x:0:
tcpdump:x:108:
nogroup:x:65534:
EOF
printf '127.0.0.1 localhost\n10.0.2.15 guest\n10.0.2.2 host\n' >"$STAGE/etc/hosts"
cp /etc/protocols /etc/services "$STAGE/etc/" 2>/dev/null || true
echo siw-vm >"$STAGE/etc/hostname"

# Kernel modules: siw.ko as extra/siw.ko, then the dependency closure of
# what init loads.
mkdir -p "$MODDIR/extra"
cp /build/siw/siw.ko "$MODDIR/extra/siw.ko"
depmod -b "$KROOT" "$KVER"
mods="siw rdma_ucm rdma_cm iw_cm ib_cm ib_uverbs ib_core crc32c_generic crc32c_intel libcrc32c
	virtio_pci virtio_net af_packet 9p 9pnet_virtio"
for m in $mods; do
	modprobe -d "$KROOT" -S "$KVER" --show-depends "$m" 2>/dev/null || echo "mkinitrd: note: no module $m" >&2
done | awk '$1 == "insmod" { print $2 }' | sort -u | while read -r ko; do
	rel=${ko#"$KROOT"}
	mkdir -p "$STAGE$(dirname "$rel")"
	cp "$ko" "$STAGE$rel"
done
for f in modules.order modules.builtin modules.builtin.modinfo; do
	[ -f "$MODDIR/$f" ] && cp "$MODDIR/$f" "$STAGE/lib/modules/$KVER/"
done
depmod -b "$STAGE" "$KVER"

install -m 755 /build/init "$STAGE/init"

(cd "$STAGE" && find . | LC_ALL=C sort | cpio -o -H newc --quiet) >"$OUT"
echo "mkinitrd: $(du -sh "$STAGE" | cut -f1) staged, $(ls "$STAGE"/usr/lib/modules/"$KVER"/kernel -R | grep -c '\.ko') modules" >&2
