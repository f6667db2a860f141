package e2e

import (
	"net/netip"
	"testing"

	"github.com/iwarpd/iwarpd/proto"
	"github.com/iwarpd/iwarpd/verbsd/verbsdtest"
)

// badVectors are address vectors the engine must refuse on an IPv4 device
// (proto.AddressVector, verbsd/ud/dest.go).
func badVectors(good proto.AddressVector) map[string]proto.AddressVector {
	v6 := proto.AddressVectorOf(netip.MustParseAddrPort("[::1]:17000"))
	flags := good
	flags.Flags = 0x80
	port0 := good
	port0.Port = 0
	family := good
	family.Family = 5
	notMapped := good
	notMapped.IP = v6.IP
	return map[string]proto.AddressVector{
		"zero": {}, "unknown family": family, "flags set": flags, "port 0": port0,
		"IPv4 family, IPv6 address": notMapped, "IPv6 on an IPv4 device": v6,
	}
}

// TestBadAddressVectorFailsOnlyItsWorkRequest: a UD SQE whose address
// vector is bad completes with a local QP operation error; the QP stays in
// RTS and the good work requests around it are sent. (Delivery is not
// asserted: UD may drop; the sender's counters are exact.)
func TestBadAddressVectorFailsOnlyItsWorkRequest(t *testing.T) {
	_, path := startServer(t, nil)
	a := newNode(t, path, 1<<16, verbsdtest.QPOptions{})
	b := newNode(t, path, 1<<16, verbsdtest.QPOptions{})
	good := a.ah(t, b)
	i := 0
	for name, av := range badVectors(good) {
		b.postRecv(t, uint64(500+i), 0, 1000)
		// bad, then good, posted back to back: usually one engine pass.
		bad := proto.SQE{WRID: uint64(100 + i), Opcode: proto.WRSend, AH: av} // unsignaled: errors complete anyway
		if err := a.qp.PostSend(bad, []proto.SGE{a.mr.SGE(0, 10)}, nil); err != nil {
			t.Fatal(err)
		}
		a.send(t, good, uint64(200+i), proto.SendSignaled, 0, 10)
		got := waitCQEs(t, a.scq, 2, name)
		if got[0].WRID != uint64(100+i) || got[0].Status != proto.WCLocQPOpErr ||
			got[1].WRID != uint64(200+i) || got[1].Status != proto.WCSuccess {
			t.Errorf("%s: completions %+v, want a local QP operation error then success", name, got)
		}
		i++
	}
	var qr proto.QueryQPReply
	if _, err := a.c.Call(proto.OpQueryQP, proto.Handle{Handle: a.qp.Handle}, &qr); err != nil || qr.State != proto.QPStateRTS {
		t.Fatalf("QP state %v (%v), want RTS", qr.State, err)
	}
	c := qpCounters(t, path, a.qp.QPN)
	if c["wr_errors"] != int64(i) || c["datagrams_out"] != int64(i) || c["messages_out"] != int64(i) {
		t.Errorf("counters wr_errors %d, datagrams_out %d, messages_out %d; want %d each",
			c["wr_errors"], c["datagrams_out"], c["messages_out"], i)
	}
}
