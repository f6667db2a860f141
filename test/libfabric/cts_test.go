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
// unexpected. Standing credits: a 1 MiB send posted before any receive
// (into the credit A granted when it took B's earlier rendezvous)
// completes while A makes no call, and A's receive then takes it; a
// message sent by the credit keeps its place before a small one sent
// after it; and after B took a message from an endpoint not in its AV
// (which ends offers: B could not count it), B's next large send still
// goes by the credit. The same program with FI_IWARPD_CTS=0 ("off") checks the
// same matching with no offer or credit made.
func TestReceiverReady(t *testing.T) {
	t.Run("on", func(t *testing.T) { runProvProgram(t, "fi_cts") })
	t.Run("off", func(t *testing.T) { runProvProgram(t, "fi_cts", "iwarpd", "off") })
}
