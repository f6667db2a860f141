#!/bin/sh
# nsrsh.sh — the "remote shell" Open MPI's rsh launcher (plm_rsh_agent)
# calls to start its daemon (orted) on a "host" that is really a network
# namespace of this machine: mpirun runs as
#   nsrsh.sh [ssh-style options] HOST COMMAND...
# and this runs COMMAND with sh inside the namespace HOST maps to, with the
# environment that namespace's ranks need (their iwarpd socket, say).
#
# The map is the file $IWMPI_NSRSH_MAP, one line per host:
#   HOST NAMESPACE [VAR=VALUE ...]
# NAMESPACE "-" is the caller's own (hosts that are only names, so that
# Open MPI takes each for a node of its own: docs/mpi.md).
# (test/mpi writes it; see docs/mpi.md). Values must not contain spaces.
set -eu
map=${IWMPI_NSRSH_MAP:?nsrsh.sh: IWMPI_NSRSH_MAP (the host-to-namespace map file) is not set}
# Skip ssh-style options mpirun may pass before the host (-x, -o opt, ...).
while [ $# -gt 0 ]; do
	case $1 in
	-o | -l | -p | -i | -F) shift 2 ;;
	-*) shift ;;
	*) break ;;
	esac
done
host=${1:?nsrsh.sh: no host argument}
shift
line=$(awk -v h="$host" '$1 == h { print; exit }' "$map")
if [ -z "$line" ]; then
	echo "nsrsh.sh: host $host is not in $map (hosts there: $(awk '{printf "%s ", $1}' "$map"))" >&2
	exit 255
fi
ns=$(echo "$line" | awk '{ print $2 }')
vars=$(echo "$line" | cut -d' ' -f3-)
[ "$vars" = "$line" ] && vars=""
# Every "host" is this machine (same node name), so each orted gets a
# session directory of its own beside the map: orteds sharing
# /tmp/ompi.NODE.UID raced in mkdir ("File exists", orte_init failed).
tmp="$(dirname "$map")/orted-$host"
mkdir -p "$tmp"
vars="OMPI_MCA_orte_tmpdir_base=$tmp $vars"
# The command arrives as words an ssh server would join and hand to the
# user's shell: do the same.
# shellcheck disable=SC2086
[ "$ns" = - ] && exec env $vars sh -c "$*"
# shellcheck disable=SC2086
exec ip netns exec "$ns" env $vars sh -c "$*"
