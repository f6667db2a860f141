package e2e

import (
	"bytes"
	"testing"

	"github.com/iwarpd/iwarpd/ddp"
	"github.com/iwarpd/iwarpd/mpa"
	"github.com/iwarpd/iwarpd/proto"
	"github.com/iwarpd/iwarpd/verbsd/rc"
	"golang.org/x/sys/unix"
)

// TestRCRefreshEMSS: an EMSS read from the socket is read again between
// messages (refreshEMSS): a connection whose EMSS is stale (set back to
// 1460 here, as the half-window bound leaves a fresh loopback socket at
// 32 KiB) takes the socket's TCP_MAXSEG at the next check, its FPDU
// payload bounds follow, and the Writes around the change arrive intact.
func TestRCRefreshEMSS(t *testing.T) {
	const n = 256 << 10
	a, b := rcPairOf(t, 2*n, true, false, 0)
	var sockMSS int
	if err := a.engineQP(func(q *rc.QP) error {
		c := q.Conn
		if !c.EmssAuto {
			t.Errorf("EMSS %d from the socket is not followed", c.Emss)
		}
		c.Emss, c.EmssCheck = 1460, rc.EMSSEvery-2
		mulpdu := mpa.MULPDU(c.Emss, false)
		c.MaxTagged, c.MaxUntagged = ddp.MaxPayload(mulpdu, true, 0), ddp.MaxPayload(mulpdu, false, 0)
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	for i := range 2 { // the first with the stale EMSS, the second after the check
		rcFill(a.mr.Buf[i*n:(i+1)*n], 20+i)
		a.postSend(proto.SQE{WRID: uint64(i), Opcode: proto.WRRDMAWrite, Flags: proto.SendSignaled,
			RKey: b.mr.RKey, RemoteAddr: b.mr.Addr(i * n)}, []proto.SGE{a.mr.SGE(i*n, n)}, nil)
		if c := a.waitCQEs(a.scq, 1, "write"); c[0].Status != proto.WCSuccess {
			t.Fatalf("write %d: %+v", i, c[0])
		}
	}
	// A Send behind the Writes: once it is received, they are placed.
	b.postRecv(9, b.mr.SGE(0, 0))
	a.postSend(proto.SQE{WRID: 9, Opcode: proto.WRSend}, nil, nil)
	b.waitCQEs(b.rcq, 1, "the Send behind the Writes")
	if err := a.engineQP(func(q *rc.QP) error {
		c := q.Conn
		v, err := unix.GetsockoptInt(c.Fd, unix.IPPROTO_TCP, unix.TCP_MAXSEG)
		if err != nil {
			return err
		}
		sockMSS = v
		if c.Emss != v || c.MaxTagged != ddp.MaxPayload(mpa.MULPDU(v, false), true, 0) {
			t.Errorf("EMSS %d, max tagged payload %d; socket MSS %d", c.Emss, c.MaxTagged, v)
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if sockMSS == 1460 {
		t.Fatal("test setup: the loopback socket's MSS is 1460 as well")
	}
	if !bytes.Equal(b.mr.Buf[:2*n], a.mr.Buf[:2*n]) {
		t.Fatal("the Writes were not placed intact")
	}
}
