package e2e

import (
	"bytes"
	"encoding/binary"
	"net/netip"
	"sort"
	"sync"
	"testing"
	"time"
	"unsafe"

	"github.com/iwarpd/iwarpd/llp/dgram"
	"github.com/iwarpd/iwarpd/proto"
	"github.com/iwarpd/iwarpd/verbsd"
	"github.com/iwarpd/iwarpd/verbsd/config"
	"github.com/iwarpd/iwarpd/verbsd/rnic"
	"github.com/iwarpd/iwarpd/verbsd/ud"
	"golang.org/x/sys/unix"
)

// stashLink keeps back every datagram the engine sends from socket fd
// while on, copied, so that the test can send them itself in the order it
// wants (send). Other sockets, and fd once off, send as usual.
type stashLink struct {
	mu    sync.Mutex
	fd    int
	on    bool
	stash []stashedDgram
}

type stashedDgram struct {
	b   []byte
	to  netip.AddrPort
	seq uint32 // RD Sequence Number
}

func (l *stashLink) install(srv *verbsd.Server) {
	srv.Device().Engs[0].Do(func() error {
		ud.EngOf(srv.Device().Engs[0]).Sendmmsg = func(fd int, msgs []unix.Mmsghdr) (int, error) {
			l.mu.Lock()
			defer l.mu.Unlock()
			if fd != l.fd || !l.on {
				return ud.SysSendmmsg(fd, msgs)
			}
			for i := range msgs {
				h := &msgs[i].Hdr
				var b []byte
				for _, iov := range unsafe.Slice(h.Iov, h.Iovlen) {
					b = append(b, unsafe.Slice(iov.Base, iov.Len)...)
				}
				d, err := dgram.ParseRD(b, true)
				if err != nil {
					continue // GSO is off: one RD datagram per message
				}
				to := ud.GetSockaddr((*unix.RawSockaddrInet6)(unsafe.Pointer(h.Name)), h.Namelen)
				l.stash = append(l.stash, stashedDgram{b: b, to: to, seq: d.RD.Seq})
			}
			return len(msgs), nil
		}
		return nil
	})
}

// distinct returns the number of distinct sequence numbers stashed.
func (l *stashLink) distinct() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	seen := map[uint32]bool{}
	for _, s := range l.stash {
		seen[s.seq] = true
	}
	return len(seen)
}

// release turns the stash off and sends the first transmission of each
// stashed sequence number, in order but the first two swapped.
func (l *stashLink) release(t *testing.T) {
	t.Helper()
	l.mu.Lock()
	defer l.mu.Unlock()
	l.on = false
	sort.SliceStable(l.stash, func(i, j int) bool { return dgram.SeqLess(l.stash[i].seq, l.stash[j].seq) })
	var out []stashedDgram
	for _, s := range l.stash {
		if len(out) == 0 || out[len(out)-1].seq != s.seq {
			out = append(out, s)
		}
	}
	out[0], out[1] = out[1], out[0]
	for _, s := range out {
		if err := unix.Sendto(l.fd, s.b, 0, rnic.AddrToSockaddr(s.to)); err != nil {
			t.Fatalf("sending stashed datagram %d: %v", s.seq, err)
		}
	}
	l.stash = nil
}

// TestRDHeldReadWaitsForIRD: a Read Request
// held in the reorder store and released by the datagram filling the gap
// must wait for room in the IRD as one arriving in order does
// (canDeliver). The responder's IRD is 1; the requester sends 8
// requests at once and the link swaps the first two: the second (a Read
// Request) is held, the first (a Read, or an atomic: they share the IRD)
// fills the IRD, and the second is released into a full IRD. Before
// canDeliver was applied to released datagrams it was answered with an
// error message and the Read completed with WCRemOpErr (5 runs of 5 with
// the check reverted); now it waits in the backlog (rd_backlogged) and
// every request completes with its data.
func TestRDHeldReadWaitsForIRD(t *testing.T) {
	for _, first := range []string{"read", "atomic"} {
		t.Run(first, func(t *testing.T) { testRDHeldReadWaitsForIRD(t, first == "atomic") })
	}
}

func testRDHeldReadWaitsForIRD(t *testing.T, atomicFirst bool) {
	const reads, size = 8, 3000
	srv, path := startRD(t, func(c *config.Config) {
		c.GSO = false
		c.RD.IRD, c.RD.ORD = 1, reads
	})
	a := newRDNode(t, path, 1<<20, 0)
	b := newRDNode(t, path, 1<<20, proto.AccessRemoteRead|proto.AccessRemoteAtomic)
	ah := a.ah(t, b)
	read := func(wrid uint64, i int) {
		a.post(t, proto.SQE{WRID: wrid, Opcode: proto.WRRDMARead, Flags: proto.SendSignaled, AH: ah, RKey: b.mr.RKey,
			RemoteAddr: b.mr.Addr(i * size)}, []proto.SGE{a.mr.SGE(i*size, size)})
	}
	pattern(b.mr.Buf[:reads*size], 5)
	// The handshake first, on the link as it is.
	read(100, 0)
	if c := waitN(t, a.scq, 1, "first read")[0]; c.Status != proto.WCSuccess {
		t.Fatalf("first read %+v", c)
	}
	link := &stashLink{fd: qpFD(t, srv, a.qp.QPN), on: true}
	link.install(srv)
	clear(a.mr.Buf[:reads*size])
	counter := reads * size // the atomic's target, after the Reads' source
	for i := range reads {
		if i == 0 && atomicFirst {
			a.postAtomic(t, 0, proto.WRFetchAdd, ah, b, counter, proto.AtomicOperands{CompareAdd: 1}, counter)
			continue
		}
		read(uint64(i), i)
	}
	for deadline := time.Now().Add(rdWait()); link.distinct() < reads; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("the requester sent %d of %d requests", link.distinct(), reads)
		}
	}
	link.release(t)
	for i, c := range waitN(t, a.scq, reads, "requests") {
		if c.Status != proto.WCSuccess || c.WRID != uint64(i) {
			t.Fatalf("request %d completed %+v (%v), want success in order", i, c, c.Status)
		}
	}
	from := 0
	if atomicFirst {
		from = size
		if got := binary.NativeEndian.Uint64(b.mr.Buf[counter:]); got != 1 {
			t.Fatalf("atomic target %d, want 1", got)
		}
	}
	if !bytes.Equal(a.mr.Buf[from:reads*size], b.mr.Buf[from:reads*size]) {
		t.Fatal("read data differs")
	}
	cb := rdCounters(t, path, b.qp.QPN)
	if cb["rd_held"] == 0 || cb["rd_backlogged"] == 0 || cb["error_msgs_out"] != 0 {
		t.Fatalf("responder counters: rd_held %d, rd_backlogged %d, error_msgs_out %d: want the released Read Request backlogged, no error",
			cb["rd_held"], cb["rd_backlogged"], cb["error_msgs_out"])
	}
}
