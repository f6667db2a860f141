// Package mpi runs unmodified C MPI programs (progs/, built with mpicc by
// the test) under Debian's Open MPI 4.1 over the libfabric provider iwarpd
// (issue 10, acceptance 3): pml cm + mtl ofi + mtl_ofi_provider_include
// iwarpd, with 2 and 4 ranks, over two iwarpd daemons in two network
// namespaces (test/netns; mpirun launches the other namespace's ranks
// through nsrsh.sh, see mpilaunch) and over two daemons on 127.0.0.1.
// Every program checks its data and prints PASS or what differed
// (progs/check.h); a run passes when mpirun exits 0 and rank 0 printed
// "PASS <program> (<n> ranks)".
//
// IWARPD_MPI_TRANSPORTS selects the transports (comma separated; default
// "iwarpd"): "tcp" runs the same programs over libfabric's tcp provider,
// which checks the harness and the programs independently of iwarpd;
// "iwarpd;ofi_rxm" over libfabric's RxM on the provider's MSG endpoints.
// The tests skip, saying why, without root and iproute2 (namespaces), without
// mpicc/mpirun (scripts/install-mpi-deps.sh), or when the provider cannot
// be built (scripts/install-build-deps.sh); they never pass silently.
//
// Ports (private blocks below 32768; see docs/mpi.md): the daemons' UD
// ports 28200-28299 and RD ports 28300-28399, in blocks of 25.
// cmd/iwarp-bench's MPI section uses 28400-28599.
package mpi
