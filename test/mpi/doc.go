// Package mpi runs unmodified C MPI programs (progs/, built with mpicc by
// the test) under Debian's Open MPI 4.1 over the libfabric provider iwarpd
// (issue 10, acceptance 3; issue 22), with 2 and 4 ranks, over two iwarpd
// daemons in two network namespaces (test/netns; mpirun launches the other
// namespace's ranks through nsrsh.sh, see mpilaunch) and over two daemons
// on 127.0.0.1. Every program checks its data and prints PASS or what
// differed (progs/check.h); a run passes when mpirun exits 0 and rank 0
// printed "PASS <program> (<n> ranks)".
//
// TestMPIPrograms runs every program over each transport that
// IWARPD_MPI_TRANSPORTS names (comma separated, mpilaunch's names). The
// default is two: "iwarpd" (pml cm + mtl ofi on the provider's native RDM
// endpoint: mtl_ofi_provider_include iwarpd with
// FI_PROVIDER=^ofi_rxm,ofi_rxd, since the include matches by prefix) and
// "iwarpd+btl" (pml ob1 + btl ofi + osc rdma on the same endpoint; only the
// runs in btlVerified unless IWARPD_MPI_BTL_ALL=1, the passive-target
// program with 2 ranks over it alone unless IWARPD_MPI_PASSIVE_ALL=1).
// Others: "tcp" (libfabric's tcp, which checks the harness and the
// programs independently of iwarpd), "udp;ofi_rxd", "ob1+tcp" (no
// libfabric) and "iwarpd;ofi_rxm" (RxM on the provider's MSG endpoints).
// Runs that fail for reasons outside iwarpd are skipped with the reason
// (knownBad). TestMPIRxM runs bigmsg over "iwarpd;ofi_rxm" whatever
// IWARPD_MPI_TRANSPORTS says. IWARPD_MPI_ENV adds variables to every rank
// and IWARPD_MPI_LOG keeps every run's output (docs/mpi.md).
//
// The tests skip, saying why, without root and iproute2 (namespaces), without
// mpicc/mpirun (scripts/install-mpi-deps.sh), or when the provider cannot
// be built (scripts/install-build-deps.sh); they never pass silently.
//
// Ports (private blocks below 32768; see docs/mpi.md): the daemons' UD
// ports 28200-28299 and RD ports 28300-28399, in blocks of 25.
// cmd/iwarp-bench's MPI section uses 28400-28599.
package mpi
