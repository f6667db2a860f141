// Package mpilaunch builds Open MPI command lines (mpirun 4.1, Debian's
// openmpi-bin) for programs that run across the "nodes" of one machine:
// two network namespaces joined by a veth pair, or several iwarpd daemons
// in the caller's namespace. test/mpi runs its MPI test programs with it;
// cmd/iwarp-bench runs bench/mpi's program with it. docs/mpi.md explains
// the command lines.
//
// Two namespaces: mpirun runs inside the first one with a host file of the
// two nodes' addresses and --map-by node, so ranks alternate between the
// nodes (rank 0 on node 0, rank 1 on node 1, ...). Open MPI's rsh launcher
// starts its daemon (orted) on the other node through plm_rsh_agent, which
// is test/mpi/nsrsh.sh: instead of ssh it runs the command with
// `ip netns exec` in the namespace the host file's address belongs to, with
// that node's environment (its iwarpd socket, its interface) from a map
// file. Ranks inherit orted's environment, so each talks to its own node's
// daemon.
//
// One namespace, several daemons (loopback): mpirun runs one application
// context per rank (MPMD, `-np 1 env VAR=... prog : -np 1 env ... prog`),
// rank i on node i mod len(Nodes), so ranks alternate between the daemons
// as they do between namespaces.
//
// It may import the standard library only.
package mpilaunch
