#!/usr/bin/env bash
# patch-siw-params.sh DIR — turn siw's compile-time MPA/TCP knobs into module
# parameters (writable at run time in /sys/module/siw/parameters/).
#
# Upstream siw (siw_main.c) defines them as `const bool` globals, so there is
# no way to pick MPA rev 1, CRC or peer-to-peer mode without rebuilding. After
# this patch:
#
#   modprobe siw mpa_version=1 mpa_crc_required=1 peer_to_peer=1
#   echo 1 > /sys/module/siw/parameters/mpa_crc_strict
#
# Parameters: mpa_version (byte, default 2), mpa_crc_required, mpa_crc_strict,
# peer_to_peer, try_gso, siw_tcp_nagle (bool, default N), and
# relaxed_ird_negotiation (bool, default Y) when siw_cm.c has it.
# The defaults are upstream's, so an unparameterised load behaves like the
# stock module.
set -euo pipefail
dir=${1:?usage: patch-siw-params.sh SIW_SOURCE_DIR}
h=$dir/siw.h
m=$dir/siw_main.c
c=$dir/siw_cm.c
grep -q 'IWARPD_SIW_PARAMS' "$m" && exit 0 # already patched

bools="try_gso mpa_crc_required mpa_crc_strict siw_tcp_nagle peer_to_peer"
for v in $bools; do
	sed -i -E "s/^extern const bool $v;/extern bool $v;/" "$h"
	grep -qE "^extern bool $v;" "$h" || { echo "patch-siw-params: $v not declared in siw.h" >&2; exit 1; }
	sed -i -E "s/^const bool $v( = [a-z]+)?;/bool $v\1;\nmodule_param($v, bool, 0644);\nMODULE_PARM_DESC($v, \"iwarpd siw-vm: $v\");/" "$m"
	grep -q "^module_param($v, bool" "$m" || { echo "patch-siw-params: $v not defined in siw_main.c" >&2; exit 1; }
done

sed -i -E 's/^extern (const )?u_char mpa_version;/extern u_char mpa_version;/' "$h"
sed -i -E 's/^(const )?u_char mpa_version = (MPA_REVISION_[0-9]);/u_char mpa_version = \2;\nmodule_param(mpa_version, byte, 0644);\nMODULE_PARM_DESC(mpa_version, "iwarpd siw-vm: MPA revision to request (1 or 2)");/' "$m"
grep -q '^module_param(mpa_version, byte' "$m" || { echo "patch-siw-params: mpa_version not found" >&2; exit 1; }

if grep -qE '^static const bool relaxed_ird_negotiation' "$c"; then
	sed -i -E 's/^static const bool relaxed_ird_negotiation( = [a-z]+)?;/static bool relaxed_ird_negotiation\1;\nmodule_param(relaxed_ird_negotiation, bool, 0644);\nMODULE_PARM_DESC(relaxed_ird_negotiation, "iwarpd siw-vm: relaxed IRD\/ORD negotiation");/' "$c"
fi

printf '\n/* IWARPD_SIW_PARAMS: knobs above made module parameters by scripts/siw-vm/patch-siw-params.sh */\n' >>"$m"
echo "patch-siw-params: patched $dir" >&2
