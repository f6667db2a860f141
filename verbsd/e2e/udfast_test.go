package e2e

import (
	"errors"
	"testing"
	"time"

	"github.com/iwarpd/iwarpd/proto"
	"github.com/iwarpd/iwarpd/verbsd"
	"github.com/iwarpd/iwarpd/verbsd/config"
	"github.com/iwarpd/iwarpd/verbsd/ud"
	"github.com/iwarpd/iwarpd/verbsd/verbsdtest"
	"golang.org/x/sys/unix"
)

// fastNode is a client with a UD QP in RTS (internal tests of the batched
// data path; the external tests have their own helpers).
// fastNode is a UD dgramNode.
type fastNode = dgramNode

func startFast(t *testing.T, mutate func(*config.Config)) (*verbsd.Server, string) {
	t.Helper()
	return serve(t, false, mutate)
}

func newFastNode(t *testing.T, path string, size int) *fastNode {
	t.Helper()
	return newDgramNode(t, path, size, proto.QPTypeUD, 0, 1024)
}

// stream sends count messages of the given sizes (cycling) from a to b,
// each from and into its own slot, all posted at once, and checks every
// completion (in order) and every octet.
func stream(t *testing.T, a, b *fastNode, sizes []int, count int) {
	t.Helper()
	ah, err := a.c.CreateAH(a.pd, b.qp.Addr)
	if err != nil {
		t.Fatal(err)
	}
	slot := 0
	for _, s := range sizes {
		slot = max(slot, s+8)
	}
	if count*slot > len(a.mr.Buf) || count*slot > len(b.mr.Buf) {
		t.Fatalf("buffers too small for %d x %d", count, slot)
	}
	for i := range count {
		if err := b.c.PostRecv(b.qp.RQ, uint64(i), []proto.SGE{b.mr.SGE(i*slot, slot)}); err != nil {
			t.Fatal(err)
		}
	}
	for i := range count {
		size := sizes[i%len(sizes)]
		msg := a.mr.Buf[i*slot : i*slot+size]
		for j := range msg {
			msg[j] = byte(i*31 + j*7 + j>>8)
		}
		e := proto.SQE{WRID: uint64(i), Opcode: proto.WRSend, Flags: proto.SendSignaled, AH: ah}
		for {
			err := a.qp.PostSend(e, []proto.SGE{a.mr.SGE(i*slot, size)}, nil)
			if err == nil {
				break
			}
			if !errors.Is(err, verbsdtest.ErrFull) {
				t.Fatal(err)
			}
			time.Sleep(50 * time.Microsecond)
		}
	}
	sends := a.scq.Wait(count, 20*time.Second)
	recvs := b.rcq.Wait(count, 20*time.Second)
	if len(sends) != count || len(recvs) != count {
		t.Fatalf("%d send and %d receive completions, want %d", len(sends), len(recvs), count)
	}
	for i := range count {
		size := sizes[i%len(sizes)]
		if s := sends[i]; s.Status != proto.WCSuccess || s.WRID != uint64(i) || int(s.ByteLen) != size {
			t.Fatalf("send completion %d: %+v", i, s)
		}
		r := recvs[i]
		if r.Status != proto.WCSuccess || r.WRID != uint64(i) || int(r.ByteLen) != size {
			t.Fatalf("receive completion %d: %+v", i, r)
		}
		got := b.mr.Buf[i*slot : i*slot+size]
		for j := range got {
			if got[j] != byte(i*31+j*7+j>>8) {
				t.Fatalf("message %d (%d octets): octet %d differs", i, size, j)
			}
		}
	}
}

func qpStats(t *testing.T, path string, qpn uint32) map[string]int64 {
	t.Helper()
	c, err := verbsdtest.Dial(path, true)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	in, err := c.Inspect()
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range in.Sessions {
		for _, q := range s.QPs {
			if q.QPN == qpn {
				return q.Counters
			}
		}
	}
	t.Fatalf("QP %d not found", qpn)
	return nil
}

var streamSizes = []int{64, 0, 1450, 1451, 5000, 65536, 100, 3000, 200000, 1}

// TestBatchedStream: many messages of mixed sizes posted at once, with GSO
// and GRO (default), with neither, and with large datagrams.
func TestBatchedStream(t *testing.T) {
	for _, tc := range []struct {
		name   string
		mutate func(*config.Config)
	}{
		{"gso-gro", nil},
		{"plain", func(c *config.Config) { c.GSO, c.GRO = false, false }},
		{"large-datagrams", func(c *config.Config) { c.DatagramSize = 65000 }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, path := startFast(t, tc.mutate)
			a := newFastNode(t, path, 16<<20)
			b := newFastNode(t, path, 16<<20)
			stream(t, a, b, streamSizes, 60)
			// Small messages: with GSO/GRO many share a buffer and are
			// copied into place, receives of later slots moved aside.
			stream(t, a, b, []int{64}, 300)
			ca, cb := qpStats(t, path, a.qp.QPN), qpStats(t, path, b.qp.QPN)
			t.Logf("sender %v\nreceiver %v", ca, cb)
			if ca["messages_out"] != 360 || cb["messages_in"] != 360 || cb["drop_no_recv"] != 0 {
				t.Fatalf("counters: sender %v receiver %v", ca, cb)
			}
			if tc.name == "gso-gro" && (ca["gso_sends"] == 0 || ca["send_calls"] >= ca["datagrams_out"]) {
				t.Errorf("no batching/GSO: %v", ca)
			}
			if tc.name == "plain" && (ca["gso_sends"] != 0 || cb["gro_coalesced"] != 0) {
				t.Errorf("GSO/GRO used while off: %v %v", ca, cb)
			}
		})
	}
}

// TestShortSendsResume: the kernel takes fewer messages than offered, or
// none (EAGAIN): the engine resumes at the first datagram not sent, and
// completions stay in order.
func TestShortSendsResume(t *testing.T) {
	srv, path := startFast(t, nil)
	calls := 0
	setSendmmsg(srv, func(fd int, msgs []unix.Mmsghdr) (int, error) { // engines_internal_test.go
		calls++
		switch {
		case calls%3 == 0:
			return 0, unix.EAGAIN
		case len(msgs) > 1:
			return ud.SysSendmmsg(fd, msgs[:len(msgs)/2])
		}
		return ud.SysSendmmsg(fd, msgs)
	})
	a := newFastNode(t, path, 16<<20)
	b := newFastNode(t, path, 16<<20)
	stream(t, a, b, streamSizes, 60)
	if c := qpStats(t, path, a.qp.QPN); c["send_blocked"] == 0 {
		t.Errorf("no short send happened: %v", c)
	}
}

// TestGSOFallback: a kernel that refuses UDP_SEGMENT (EIO) makes the QP
// send one datagram per message from then on, without losing any.
func TestGSOFallback(t *testing.T) {
	srv, path := startFast(t, nil)
	setSendmmsg(srv, func(fd int, msgs []unix.Mmsghdr) (int, error) { // engines_internal_test.go
		for i := range msgs {
			if msgs[i].Hdr.Controllen != 0 {
				if i == 0 {
					return 0, unix.EIO
				}
				return ud.SysSendmmsg(fd, msgs[:i])
			}
		}
		return ud.SysSendmmsg(fd, msgs)
	})
	a := newFastNode(t, path, 16<<20)
	b := newFastNode(t, path, 16<<20)
	stream(t, a, b, streamSizes, 30)
	if c := qpStats(t, path, a.qp.QPN); c["gso_fallback"] != 1 || c["gso_sends"] != 0 {
		t.Errorf("fallback counters: %v", c)
	}
}
