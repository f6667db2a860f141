#!/bin/sh
# scripts/install-provider.sh SO DESTDIR PROVDIR [private]
#
# Installs the libfabric provider SO as DESTDIR/PROVDIR/libiwarpd-fi.so
# (c/prov/prov.mk's install target) and says what it replaced: the previous
# file's build id (the ELF note, readelf -n) and the version string the
# provider embeds ("iwarpd-fi build <git describe>", c/prov/iwd_init.c), so
# that a build installed over another one from another checkout is never a
# silent replacement. "private" (PREFIX given to make install): libfabric
# finds the provider only through FI_PROVIDER_PATH, which is printed.
# docs/libfabric.md "Installing the provider".
set -eu
so=$1
destdir=$2
provdir=$3
private=${4:-}
dst="$destdir$provdir/libiwarpd-fi.so"

describe() {
	id=$(readelf -n "$1" 2>/dev/null | sed -n 's/^ *Build ID: *//p' | head -n 1)
	ver=$(LC_ALL=C grep -a -o -m 1 'iwarpd-fi build [[:print:]]*' "$1" 2>/dev/null | head -n 1 | sed 's/^iwarpd-fi build //')
	echo "build id ${id:-none}, version ${ver:-none (a build from before versions were embedded, or not iwarpd)}"
}

if [ ! -e "$so" ]; then
	echo "install-provider: $so not built: run make build first" >&2
	exit 1
fi
if [ -e "$dst" ]; then
	if cmp -s "$so" "$dst"; then
		echo "install: $dst is already this build"
	else
		echo "install: REPLACING $dst"
		echo "install:   previous: $(describe "$dst"), installed $(stat -c %y "$dst" | cut -d. -f1)"
	fi
else
	echo "install: $dst (new: no provider was there)"
fi
install -d "$destdir$provdir"
install -m 0644 "$so" "$dst"
echo "install:   installed: $(describe "$dst")"
if [ -n "$private" ]; then
	echo "install: a private provider: libfabric loads it only with FI_PROVIDER_PATH=$provdir (docs/libfabric.md \"Installing the provider\")"
else
	echo "install: libfabric's own provider directory: every program loads this one without FI_PROVIDER_PATH, and the next make install from any checkout replaces it (make install PREFIX=DIR installs a private one)"
fi
