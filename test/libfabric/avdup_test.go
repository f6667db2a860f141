package libfabric

import "testing"

// TestAVDuplicateInsert runs c/prov/tests/fi_av_dup.c: an address inserted
// three times into an RDM endpoint's AV keeps one fi_addr (docs/libfabric.md
// "Address vectors"), a receive with FI_DIRECTED_RECV naming the fi_addr
// any insert returned matches that peer's messages, posted or unexpected,
// tagged or not, and not another peer's, with that fi_addr as the
// completion's source; fi_av_remove drops one insert at a time, and a
// removed address can be inserted again. Before, a duplicate got an fi_addr
// of its own that no message reported, and Open MPI's MPI_Intercomm_create
// (test/mpi's intercomm) hung on a directed receive naming it.
func TestAVDuplicateInsert(t *testing.T) {
	runProvProgram(t, "fi_av_dup")
}
