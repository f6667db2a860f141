package libfabric

import "testing"

// TestSharedReceiveContext runs c/prov/tests/fi_srx.c (ASan+UBSan) against
// a real daemon: two FI_EP_MSG connections accepted onto endpoints sharing
// one shared receive context (fi_endpoint(3) fi_srx_context, on the
// daemon's SRQ). Messages sent before any receive is posted (held by the
// daemon) are taken by receives posted to the srx later, each completing on
// the CQ of the endpoint it arrived on with its data intact; a cancelled
// receive is reported FI_ECANCELED on the srx's CQ, its buffer never
// written, the next message going to the receive after it; fi_close of a
// bound srx is -FI_EBUSY (fabtests' fi_shared_ctx -e msg, issue 19).
func TestSharedReceiveContext(t *testing.T) {
	runProvProgram(t, "fi_srx")
}
