package libfabric

import (
	"fmt"
	"net"
	"strconv"
	"sync/atomic"
	"testing"
)

// Ports of TestNamedPorts: triples from 28100-28199 (doc.go).
const namedPortLo, namedPortCnt = 28100, 33

var nextNamed atomic.Int32

// freeTriple returns P such that TCP P and UDP P+1, P+2 of 127.0.0.1 were
// free a moment ago, from the package's private block.
func freeTriple(t *testing.T) int {
	t.Helper()
	for range namedPortCnt {
		p := namedPortLo + 3*(int(nextNamed.Add(1)-1)%namedPortCnt)
		l, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", p))
		if err != nil {
			continue
		}
		u1, err1 := net.ListenPacket("udp", fmt.Sprintf("127.0.0.1:%d", p+1))
		u2, err2 := net.ListenPacket("udp", fmt.Sprintf("127.0.0.1:%d", p+2))
		l.Close()
		for _, u := range []net.PacketConn{u1, u2} {
			if u != nil {
				u.Close()
			}
		}
		if err1 == nil && err2 == nil {
			return p
		}
	}
	t.Fatalf("no free port triple in %d-%d", namedPortLo, namedPortLo+3*namedPortCnt-1)
	return 0
}

// TestNamedPorts runs c/prov/tests/fi_named_port.c (issue 19 items 1 and
// 3): an MSG listener on a named port accepts (the accepting endpoint's RC
// QP was created with the listener's port and refused), RDM and DGRAM
// endpoints bind named ports outside the daemon's ranges, and fi_getinfo
// refuses a source address the daemon does not serve.
func TestNamedPorts(t *testing.T) {
	runProvProgram(t, "fi_named_port", strconv.Itoa(freeTriple(t)))
}

// TestSemantics runs c/prov/tests/fi_semantics.c (issue 19 items 4 and 5,
// what fabtests' fi_getinfo_test, fi_av_test, fi_cq_test and
// fi_msg_inject found): honest fi_getinfo attributes (tx/rx caps,
// msg_order, control progress, FI_MR_BASIC, RDM CQ data with
// fi_inject_writedata), FI_SYNC_ERR's 0 for a good address, fi_cq_signal
// waking a blocked fi_cq_sread, and a completion for fi_sendmsg with the
// FI_INJECT flag (none for fi_inject).
func TestSemantics(t *testing.T) {
	runProvProgram(t, "fi_semantics")
}
