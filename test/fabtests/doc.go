// Package fabtests runs libfabric's own conformance suite, fabtests v1.17.0
// (../shared/conformance, the tag of Debian's libfabric), against the iwarpd
// provider and against reference providers in the same run (issue 19,
// docs/libfabric.md "fabtests").
//
// Build compiles the suite once into a cache directory (autogen.sh,
// configure, make install; reused while its programs are there). Run drives
// the unit, functional and short sets as runfabtests.sh v1.17.0 lists them
// (Tests), for each Config: every test's server and client are separate
// processes in a process group of their own, each with a timeout and an
// address-space cap (prlimit --as), and only those processes are ever
// killed (runfabtests.sh kills every fi_* process on the machine). A test
// passes when both exit 0, is not run when both exit 61 (-FI_ENODATA) or
// both 38 (-FI_ENOSYS), and fails otherwise — runfabtests.sh's rules.
// Classify counts apart a failure of iwarpd;ofi_rxd that its reference
// udp;ofi_rxd (the same utility provider over libfabric's udp) had the
// same way in the same run. Table prints passed/failed/notrun per
// configuration.
//
// cmd/fabtests-run is the command `make fabtests` runs; this package's test
// runs the native RDM and iwarpd;ofi_rxm configurations in `make test`,
// and fi_msg_inject over iwarpd;ofi_rxd against udp;ofi_rxd (ports
// 24200-24299, 24400-24499, 24700-24999: fabtests_test.go).
package fabtests
