package libfabric

import "testing"

// TestReceiverReady runs c/prov/tests/fi_cts.c (docs/libfabric.md
// "Progress while both ranks compute"): a large tagged receive directed at
// one peer offers its staging to the sender, whose daemon then writes the
// message while the receiver makes no libfabric call (the sender's send
// completes on the sender's calls alone), and matching stays exact: a
// smaller message of the tag sent first takes the receive, an
// FI_ADDR_UNSPEC receive posted first takes the first message and no offer
// is made, an unexpected message is taken as before, a message of another
// tag passes the offer, and a cancelled receive's message waits as
// unexpected. The same program with FI_IWARPD_CTS=0 ("off") checks the
// same matching with no offer made.
func TestReceiverReady(t *testing.T) {
	t.Run("on", func(t *testing.T) { runProvProgram(t, "fi_cts") })
	t.Run("off", func(t *testing.T) { runProvProgram(t, "fi_cts", "iwarpd", "off") })
}
