package e2e

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/iwarpd/iwarpd/proto"
	"github.com/iwarpd/iwarpd/verbsd/config"
	"github.com/iwarpd/iwarpd/verbsd/verbsdtest"
	"golang.org/x/sys/unix"
)

func attach(c *verbsdtest.Client, q *verbsdtest.QP, group string, on bool) error {
	op := proto.OpAttachMcast
	if !on {
		op = proto.OpDetachMcast
	}
	_, err := c.Call(op, proto.McastRequest{QP: q.Handle, Group: group}, nil)
	return err
}

// mcastGroup is a group and port of this test process.
func mcastGroup() string {
	return fmt.Sprintf("239.255.%d.%d:%d", os.Getpid()%200+1, os.Getpid()%250+1, 30000+os.Getpid()%20000)
}

// TestMulticastLoopback: three UD QPs in two daemons (each its own engine)
// attach to one group; a Send to the group's AH reaches all three (the
// sender's own daemon by IP_MULTICAST_LOOP); a detached QP gets nothing
// more. Attach and detach errors: EEXIST, EINVAL, ENOENT.
func TestMulticastLoopback(t *testing.T) {
	mc := func(c *config.Config) { c.Mcast.Interface = "lo" }
	_, path1 := startFast(t, mc)
	_, path2 := startFast(t, mc)
	sender := newFastNode(t, path1, 1<<20)
	members := []*fastNode{newFastNode(t, path1, 1<<20), newFastNode(t, path2, 1<<20), newFastNode(t, path2, 1<<20)}
	group := mcastGroup()
	for i, m := range members {
		if err := attach(m.c, m.qp, group, true); err != nil {
			if i == 0 && (errors.Is(err, unix.ENODEV) || errors.Is(err, unix.EADDRNOTAVAIL)) {
				t.Skipf("multicast on lo unavailable: %v", err)
			}
			t.Fatalf("attach %d: %v", i, err)
		}
	}
	if err := attach(members[0].c, members[0].qp, group, true); !errors.Is(err, unix.EEXIST) {
		t.Errorf("second attach: %v, want EEXIST", err)
	}
	for _, bad := range []string{"10.0.0.1:5000", "239.1.1.1:0", "nonsense"} {
		if err := attach(members[0].c, members[0].qp, bad, true); !errors.Is(err, unix.EINVAL) {
			t.Errorf("attach %q: %v, want EINVAL", bad, err)
		}
	}
	ah, err := sender.c.CreateAH(sender.pd, group)
	if err != nil {
		t.Fatal(err)
	}
	send := func(wrid uint64, size int) {
		t.Helper()
		msg := sender.mr.Buf[:size]
		for j := range msg {
			msg[j] = byte(j*5 + int(wrid))
		}
		e := proto.SQE{WRID: wrid, Opcode: proto.WRSend, Flags: proto.SendSignaled, AH: ah}
		if err := sender.qp.PostSend(e, []proto.SGE{sender.mr.SGE(0, size)}, nil); err != nil {
			t.Fatal(err)
		}
		if sc := waitOne(t, sender.scq, "group send"); sc.Status != proto.WCSuccess {
			t.Fatalf("group send: %+v", sc)
		}
	}
	for _, size := range []int{1, 3000} { // single and multi-datagram
		for _, m := range members {
			if err := m.c.PostRecv(m.qp.RQ, uint64(size), []proto.SGE{m.mr.SGE(0, 4096)}); err != nil {
				t.Fatal(err)
			}
		}
		send(uint64(size), size)
		for i, m := range members {
			rc := waitOne(t, m.rcq, fmt.Sprintf("member %d size %d", i, size))
			if rc.Status != proto.WCSuccess || int(rc.ByteLen) != size || rc.Src.String() != sender.qp.Addr {
				t.Fatalf("member %d: %+v", i, rc)
			}
			if !bytes.Equal(m.mr.Buf[:size], sender.mr.Buf[:size]) {
				t.Fatalf("member %d: payload differs", i)
			}
		}
	}
	// Detach member 1: it gets nothing more; the others still do.
	if err := attach(members[1].c, members[1].qp, group, false); err != nil {
		t.Fatal(err)
	}
	if err := attach(members[1].c, members[1].qp, group, false); !errors.Is(err, unix.ENOENT) {
		t.Errorf("second detach: %v, want ENOENT", err)
	}
	for _, m := range members {
		if err := m.c.PostRecv(m.qp.RQ, 9, []proto.SGE{m.mr.SGE(0, 4096)}); err != nil {
			t.Fatal(err)
		}
	}
	send(9, 100)
	for _, i := range []int{0, 2} {
		if rc := waitOne(t, members[i].rcq, "after detach"); rc.Status != proto.WCSuccess || rc.ByteLen != 100 {
			t.Fatalf("member %d after detach: %+v", i, rc)
		}
	}
	time.Sleep(50 * time.Millisecond)
	if got := members[1].rcq.Poll(); len(got) != 0 {
		t.Fatalf("detached member received: %+v", got)
	}
}
