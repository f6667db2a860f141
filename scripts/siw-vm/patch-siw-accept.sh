#!/usr/bin/env bash
# patch-siw-accept.sh DIR — add the module parameter accept_assoc_early
# (default N: stock behaviour) that closes a lost-wakeup race in siw_accept
# (drivers/infiniband/sw/siw/siw_cm.c, Linux 6.1.192).
#
# The race: siw_accept sends the MPA Reply (siw_send_mpareqrep) and only then
# hands the socket to the QP (siw_qp_socket_assoc installs
# siw_qp_llp_data_ready). An initiator may send its first FPDU as soon as it
# has the Reply (RFC 5044 §7.1.2); if that FPDU arrives in between, the CM's
# siw_cm_llp_data_ready sees state RDMA_MODE and ignores it, the bytes stay in
# the socket, and nothing reads them until more data arrives — which never
# happens when the initiator waits for an answer (rping: the client's first
# Send, then the server's RDMA Read). Under TCG with a loaded host the window
# is milliseconds wide (docs/siw-interop.md "Soak").
#
# With accept_assoc_early=Y the socket is handed to the QP (already in RTS)
# before the Reply goes out, so the first FPDU always finds the QP's upcall
# (the later siw_qp_socket_assoc installs the same callbacks again). Only
# without peer-to-peer mode: installing the RTR upcalls early as well let the
# initiator's RTR raise ESTABLISHED before iw_cm had finished the accept
# (kernel BUG at iwcm.c:867 in the soak), so peer-to-peer keeps the race.
set -euo pipefail
dir=${1:?usage: patch-siw-accept.sh SIW_SOURCE_DIR}
c=$dir/siw_cm.c
grep -q 'IWARPD_SIW_ACCEPT' "$c" && exit 0 # already patched

# The parameter, after the includes.
sed -i -E '0,/^#include "siw_cm.h"$/s//#include "siw_cm.h"\n\n\/* IWARPD_SIW_ACCEPT: scripts\/siw-vm\/patch-siw-accept.sh *\/\nstatic bool accept_assoc_early;\nmodule_param(accept_assoc_early, bool, 0644);\nMODULE_PARM_DESC(accept_assoc_early, "iwarpd siw-vm: hand the socket to the QP before sending the MPA Reply (closes a lost-wakeup race)");/' "$c"
grep -q '^static bool accept_assoc_early;' "$c" || { echo "patch-siw-accept: include anchor not found" >&2; exit 1; }

# Early association in siw_accept, before the Reply is sent.
n=$(grep -c '^	rv = siw_send_mpareqrep(cep, params->private_data,$' "$c" || true)
[ "$n" = 1 ] || { echo "patch-siw-accept: expected one siw_send_mpareqrep in siw_accept, found $n" >&2; exit 1; }
sed -i -E 's/^	rv = siw_send_mpareqrep\(cep, params->private_data,$/	if (accept_assoc_early \&\& !wait_for_peer_rts)\n		siw_qp_socket_assoc(cep, qp);\n\n	rv = siw_send_mpareqrep(cep, params->private_data,/' "$c"
grep -q '^	if (accept_assoc_early && !wait_for_peer_rts)$' "$c" || { echo "patch-siw-accept: insertion failed" >&2; exit 1; }
