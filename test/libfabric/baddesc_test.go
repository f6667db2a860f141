package libfabric

import "testing"

// TestBadDescriptors runs c/prov/tests/fi_baddesc.c (built with ASan and
// UBSan) against a real daemon: a desc that is not a live MR of the
// provider (a made-up pointer, a stack address, a closed MR's) and a NULL
// buffer with a non-zero length get -FI_EINVAL from fi_send, fi_senddata
// (eager and rendezvous sizes), fi_inject, fi_recv, fi_write and fi_read,
// instead of a crash of the application (issue 18, defect 5;
// docs/libfabric.md "Failures"), and the endpoints then still carry a
// message, a zero-length message from a NULL buffer and an RDMA Write.
func TestBadDescriptors(t *testing.T) {
	runProvProgram(t, "fi_baddesc")
}
