package libfabric

import "testing"

// TestPollSet runs c/prov/tests/fi_poll.c (built with ASan and UBSan)
// against a real daemon: a poll set (fi_poll(3)) over two native RDM
// endpoints' CQs and counters reports nothing while nothing happened,
// drives a message from one endpoint to the other with fi_poll alone
// (manual progress), then reports each CQ until it is read and each
// counter once per change (value or error count), at most count contexts
// per call; fi_poll_del stops the reports; a second add, a del of a
// non-member, an AV as member and reserved attr flags are refused, and
// fi_close of a member CQ or counter, or of a poll set with members, is
// -FI_EBUSY (issue 19: fabtests fi_poll -t queue / -t counter).
func TestPollSet(t *testing.T) {
	runProvProgram(t, "fi_poll")
}
