package e2e

import (
	"net/netip"
	"testing"

	"github.com/iwarpd/iwarpd/proto"
)

// TestRDBadAddressVector: on an RD QP too, a work request whose address
// vector is bad (ud/dest.go) completes with a local QP operation error and
// the QP goes on: the next Send to a good destination is delivered.
func TestRDBadAddressVector(t *testing.T) {
	_, path := startRD(t, nil)
	a := newRDNode(t, path, 1<<16, 0)
	b := newRDNode(t, path, 1<<16, 0)
	good := a.ah(t, b)
	bad := proto.AddressVectorOf(netip.MustParseAddrPort("[::1]:9")) // IPv6 on an IPv4 device
	port0 := good
	port0.Port = 0
	b.recv(t, 1, 0, 100)
	a.post(t, proto.SQE{WRID: 10, Opcode: proto.WRSend, AH: bad}, []proto.SGE{a.mr.SGE(0, 10)})
	a.post(t, proto.SQE{WRID: 11, Opcode: proto.WRRDMARead, AH: port0}, []proto.SGE{a.mr.SGE(0, 10)})
	a.post(t, proto.SQE{WRID: 12, Opcode: proto.WRSend, Flags: proto.SendSignaled, AH: good}, []proto.SGE{a.mr.SGE(0, 10)})
	got := waitN(t, a.scq, 3, "sends")
	if got[0].WRID != 10 || got[0].Status != proto.WCLocQPOpErr || got[1].WRID != 11 || got[1].Status != proto.WCLocQPOpErr ||
		got[2].WRID != 12 || got[2].Status != proto.WCSuccess {
		t.Fatalf("completions %+v, want two local QP operation errors, then success", got)
	}
	if rc := waitN(t, b.rcq, 1, "receive")[0]; rc.Status != proto.WCSuccess || rc.WRID != 1 || rc.ByteLen != 10 {
		t.Fatalf("receive %+v", rc)
	}
}
