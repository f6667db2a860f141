package ud

import (
	"bytes"
	"errors"
	"net/netip"
	"testing"
	"time"
	"unsafe"

	"github.com/iwarpd/iwarpd/internal/shm"
	"github.com/iwarpd/iwarpd/proto"
	"github.com/iwarpd/iwarpd/verbsd/rnic"
	"golang.org/x/sys/unix"
)

// udpPair opens two non-blocking UDP sockets on 127.0.0.1 (the second with
// UDP_GRO when gro) and returns them with the second one's address.
func udpPair(t testing.TB, gro bool) (int, int, netip.AddrPort) {
	t.Helper()
	var fds [2]int
	for i := range fds {
		fd, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_NONBLOCK|unix.SOCK_CLOEXEC, 0)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { unix.Close(fd) })
		if err := unix.Bind(fd, &unix.SockaddrInet4{Addr: [4]byte{127, 0, 0, 1}}); err != nil {
			t.Fatal(err)
		}
		unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_RCVBUF, 4<<20)
		fds[i] = fd
	}
	if gro {
		if err := unix.SetsockoptInt(fds[1], unix.SOL_UDP, unix.UDP_GRO, 1); err != nil {
			t.Skipf("UDP_GRO: %v", err)
		}
	}
	sa, err := unix.Getsockname(fds[1])
	if err != nil {
		t.Fatal(err)
	}
	a := sa.(*unix.SockaddrInet4)
	return fds[0], fds[1], netip.AddrPortFrom(netip.AddrFrom4(a.Addr), uint16(a.Port))
}

// pushDatagram adds a datagram [hdr][payload][crc] to b (hdr and crc are
// recognisable filler, not DDP).
func pushDatagram(b *SendBatch, dest netip.AddrPort, payload []byte, ref DgramRef) bool {
	dlen := 18 + len(payload) + 4
	pieces := [][]byte{payload}
	if len(payload) == 0 {
		pieces = nil
	}
	if !b.Fits(dest, dlen, 2+len(pieces), MaxSendMsgs) {
		return false
	}
	sc := b.NextScratch()
	for i := range 22 {
		sc[i] = byte(0xa0 + ref.Seg)
	}
	b.Push(dest, sc[:18], pieces, sc[18:22], ref)
	return true
}

func TestSendBatchGrouping(t *testing.T) {
	d1 := netip.MustParseAddrPort("127.0.0.1:1000")
	d2 := netip.MustParseAddrPort("127.0.0.1:2000")
	full := make([]byte, 100)
	short := make([]byte, 40)
	b := NewSendBatch()
	b.Reset(true)
	pushDatagram(b, d1, full, DgramRef{0, 0})
	pushDatagram(b, d1, full, DgramRef{0, 1})
	pushDatagram(b, d1, short, DgramRef{0, 2}) // shorter: ends the GSO message
	pushDatagram(b, d1, full, DgramRef{1, 0})  // new message
	pushDatagram(b, d2, full, DgramRef{2, 0})  // other destination: new message
	pushDatagram(b, d2, make([]byte, 120), DgramRef{3, 0})
	msgs := b.Finish()
	if len(msgs) != 4 {
		t.Fatalf("%d messages, want 4", len(msgs))
	}
	want := [][]DgramRef{{{0, 0}, {0, 1}, {0, 2}}, {{1, 0}}, {{2, 0}}, {{3, 0}}}
	for i, w := range want {
		got := b.MsgDgrams(i)
		if len(got) != len(w) {
			t.Fatalf("message %d: datagrams %v, want %v", i, got, w)
		}
		for j := range w {
			if got[j] != w[j] {
				t.Fatalf("message %d: datagrams %v, want %v", i, got, w)
			}
		}
	}
	if h := msgs[0].Hdr; h.Iovlen != 9 || h.Controllen != uint64(unix.CmsgSpace(2)) {
		t.Fatalf("GSO message: %d iovecs, control %d", h.Iovlen, h.Controllen)
	}
	cm := b.CmsgBytes(0)
	if hdr := (*unix.Cmsghdr)(unsafe.Pointer(&cm[0])); hdr.Level != unix.SOL_UDP || hdr.Type != unix.UDP_SEGMENT ||
		cm[unix.SizeofCmsghdr] != 122 || cm[unix.SizeofCmsghdr+1] != 0 {
		t.Fatalf("UDP_SEGMENT cmsg %+v % x", hdr, cm)
	}
	for i := 1; i < 4; i++ {
		if h := msgs[i].Hdr; h.Control != nil || h.Controllen != 0 || h.Iovlen != 3 {
			t.Fatalf("message %d: control %d, %d iovecs", i, h.Controllen, h.Iovlen)
		}
	}
	if GetSockaddr(&b.Names[2], msgs[2].Hdr.Namelen) != d2 {
		t.Fatalf("destination %v", GetSockaddr(&b.Names[2], msgs[2].Hdr.Namelen))
	}

	// Without GSO: one datagram per message.
	b.Reset(false)
	for i := range 3 {
		pushDatagram(b, d1, full, DgramRef{0, uint32(i)})
	}
	if msgs := b.Finish(); len(msgs) != 3 {
		t.Fatalf("no GSO: %d messages", len(msgs))
	}

	// Bounds: segments per GSO message, octets per GSO message.
	b.Reset(true)
	for i := range MaxGSOSegments + 1 {
		if !pushDatagram(b, d1, make([]byte, 10), DgramRef{0, uint32(i)}) {
			t.Fatal("batch full")
		}
	}
	if msgs := b.Finish(); len(msgs) != 2 || len(b.MsgDgrams(0)) != MaxGSOSegments {
		t.Fatalf("segment bound: %d messages, %d in the first", len(msgs), len(b.MsgDgrams(0)))
	}
	b.Reset(true)
	big := make([]byte, 30000)
	for i := range 3 {
		pushDatagram(b, d1, big, DgramRef{0, uint32(i)})
	}
	if msgs := b.Finish(); len(msgs) != 2 || len(b.MsgDgrams(0)) != 2 {
		t.Fatalf("octet bound: %d messages", len(msgs))
	}
}

// TestSendmmsgGSOAndGRO sends a batch over loopback: a GSO message of
// several datagrams and single ones, then receives with recvmmsg, without
// and with UDP_GRO, and checks every datagram.
func TestSendmmsgGSOAndGRO(t *testing.T) {
	for _, gro := range []bool{false, true} {
		tx, rx, dest := udpPair(t, gro)
		b := NewSendBatch()
		b.Reset(true)
		payloads := [][]byte{bytes.Repeat([]byte{1}, 1000), bytes.Repeat([]byte{2}, 1000), bytes.Repeat([]byte{3}, 500)}
		for i, p := range payloads {
			pushDatagram(b, dest, p, DgramRef{0, uint32(i)})
		}
		msgs := b.Finish()
		n, err := SysSendmmsg(tx, msgs)
		if err != nil && GSORefused(err) {
			t.Skipf("kernel refuses UDP GSO: %v", err)
		}
		if err != nil || n != 1 {
			t.Fatalf("sendmmsg = %d, %v", n, err)
		}
		var got [][]byte
		rb := NewRecvBatch()
		deadline := time.Now().Add(5 * time.Second)
		for len(got) < 3 && time.Now().Before(deadline) {
			k, err := SysRecvmmsg(rx, rb.Prepare(RecvSlots))
			if errors.Is(err, unix.EAGAIN) {
				time.Sleep(time.Millisecond)
				continue
			}
			if err != nil {
				t.Fatal(err)
			}
			rb.Received(k)
			for i := range k {
				s := &rb.Slots[i]
				seg := s.N
				if s.Gso > 0 {
					seg = s.Gso
				}
				for off := 0; off < s.N; off += seg {
					d := make([]byte, min(seg, s.N-off))
					rnic.CopyRange(d, s.View, off)
					got = append(got, d)
				}
				if gro && s.Gso != 1022 {
					t.Errorf("GRO segment size %d, want 1022", s.Gso)
				}
				if s.Src.Addr() != dest.Addr() {
					t.Errorf("source %v", s.Src)
				}
			}
		}
		if len(got) != 3 {
			t.Fatalf("gro %v: received %d datagrams, want 3", gro, len(got))
		}
		for i, d := range got {
			if len(d) != 22+len(payloads[i]) || d[0] != byte(0xa0+i) || !bytes.Equal(d[18:18+len(payloads[i])], payloads[i]) ||
				d[len(d)-1] != byte(0xa0+i) {
				t.Fatalf("gro %v: datagram %d wrong (%d octets)", gro, i, len(d))
			}
		}
	}
}

// TestBatchIOAllocs: building and sending a batch, and receiving one, does
// not allocate.
func TestBatchIOAllocs(t *testing.T) {
	tx, rx, dest := udpPair(t, true)
	b := NewSendBatch()
	rb := NewRecvBatch()
	payload := make([]byte, 1400)
	pieces := [][]byte{payload[:700], payload[700:]}
	allocs := testing.AllocsPerRun(200, func() {
		b.Reset(true)
		for i := range 8 {
			sc := b.NextScratch()
			b.Push(dest, sc[:18], pieces, sc[18:22], DgramRef{int32(i), 0})
		}
		if _, err := SysSendmmsg(tx, b.Finish()); err != nil {
			t.Fatal(err)
		}
		for {
			n, err := SysRecvmmsg(rx, rb.Prepare(RecvSlots))
			if err != nil {
				break
			}
			rb.Received(n)
		}
	})
	if allocs != 0 {
		t.Fatalf("%v allocations per batch, want 0", allocs)
	}
}

// A receive batch never points the kernel at client memory, even with
// receives looked ahead (a datagram dropped after recvmmsg
// must not have touched a posted buffer).
func TestPrepareKeepsClientMemoryOut(t *testing.T) {
	rb := NewRecvBatch()
	client := make([]byte, 4096)
	for k := range rb.Rqes {
		rb.Rqes[k].Bufs = [][]byte{client[k*64 : k*64+64]}
	}
	rb.Nrqe = len(rb.Rqes)
	msgs := rb.Prepare(RecvSlots)
	lo, hi := uintptr(unsafe.Pointer(&client[0])), uintptr(unsafe.Pointer(&client[len(client)-1]))
	for i := range msgs {
		s := &rb.Slots[i]
		if len(s.View) != 2 || &s.View[0][0] != &s.Hdr[0] || &s.View[1][0] != &s.Tail[0] {
			t.Fatalf("slot %d view has %d pieces, want [header][tail]", i, len(s.View))
		}
		iov := unsafe.Slice(msgs[i].Hdr.Iov, msgs[i].Hdr.Iovlen)
		for _, v := range iov {
			if p := uintptr(unsafe.Pointer(v.Base)); p >= lo && p <= hi {
				t.Fatalf("slot %d: an iovec points into a posted receive's buffer", i)
			}
		}
	}
}

func TestCopyBetweenAndChecksumAt(t *testing.T) {
	src := [][]byte{[]byte("hdr"), []byte("abc"), []byte(""), []byte("defgh")}
	dst := [][]byte{make([]byte, 2), make([]byte, 3), make([]byte, 10)}
	if n := rnic.CopyBetween(dst, src, 4, 6); n != 6 || string(dst[0]) != "bc" || string(dst[1]) != "def" || string(dst[2][:1]) != "g" {
		t.Fatalf("copyBetween = %d %q", n, dst)
	}
	small := [][]byte{make([]byte, 3)}
	if n := rnic.CopyBetween(small, src, 0, 11); n != 3 || string(small[0]) != "hdr" {
		t.Fatalf("copyBetween into a short destination = %d %q", n, small[0])
	}
	flat := []byte("hdrabcdefgh")
	if ChecksumAt(src, 2, 7) != rnic.ChecksumRange([][]byte{flat[2:9]}, 7) {
		t.Fatal("checksumAt differs from the CRC of the flat range")
	}
}

func TestSockaddrAndCmsg(t *testing.T) {
	for _, s := range []string{"127.0.0.1:17000", "[::1]:9", "[fe80::1]:65535"} {
		a := netip.MustParseAddrPort(s)
		var raw unix.RawSockaddrInet6
		n := PutSockaddr(&raw, a)
		if got := GetSockaddr(&raw, n); got != a {
			t.Errorf("%v: round trip %v", a, got)
		}
	}
	var raw unix.RawSockaddrInet6
	if got := GetSockaddr(&raw, 2); got.IsValid() {
		t.Errorf("short sockaddr: %v", got)
	}
	var w [4]uint64
	cm := unsafe.Slice((*byte)(unsafe.Pointer(&w[0])), 32)
	h := (*unix.Cmsghdr)(unsafe.Pointer(&cm[0]))
	h.Level, h.Type = unix.SOL_UDP, unix.UDP_GRO
	h.SetLen(unix.CmsgLen(4))
	cm[unix.SizeofCmsghdr] = 0xc8
	cm[unix.SizeofCmsghdr+1] = 0x05
	if got := GROSegmentSize(cm, unix.CmsgSpace(4)); got != 1480 {
		t.Fatalf("GRO size %d", got)
	}
	if got := GROSegmentSize(cm, 8); got != 0 {
		t.Fatalf("truncated control: %d", got)
	}
	h.SetLen(1000)
	if got := GROSegmentSize(cm, 32); got != 0 {
		t.Fatalf("bad length: %d", got)
	}
}

// TestRingViewLookahead looks at posted entries beyond the head, across the
// ring's wrap-around, without consuming them.
func TestRingViewLookahead(t *testing.T) {
	const depth, stride = 8, 16
	mem := make([]byte, proto.RingBytes(depth, stride))
	ring, err := shm.NewRing(mem, proto.RingRQ, depth, stride, true)
	if err != nil {
		t.Fatal(err)
	}
	prod, cons := shm.NewProducer(ring), shm.NewConsumer(ring)
	v := rnic.NewRingView(mem, depth, stride)
	post := func(tag byte) {
		slot, err := prod.Next()
		if err != nil || slot == nil {
			t.Fatalf("ring full: %v", err)
		}
		slot[0] = tag
		prod.Publish()
	}
	next := byte(0)
	for round := range 3 {
		for range 6 {
			post(next)
			next++
		}
		head, idx, n, err := v.Lookahead(cons)
		if err != nil || n != 6 {
			t.Fatalf("round %d: lookahead n=%d err=%v", round, n, err)
		}
		for k := range n {
			if got := v.At(head, idx, k)[0]; got != next-6+byte(k) {
				t.Fatalf("round %d: entry %d = %d, want %d", round, k, got, next-6+byte(k))
			}
		}
		for range 6 {
			cons.Advance()
		}
		cons.Release()
	}
	// A view that does not match the ring sees the head only.
	bad := rnic.NewRingView(mem, depth, 32)
	post(99)
	if head, _, n, _ := bad.Lookahead(cons); n != 1 || head[0] != 99 {
		t.Fatalf("mismatched view: n=%d", n)
	}
}

// TestReassemblerRanges: out of order, duplicates, partial overlaps, and
// no allocation once warm.
func TestReassemblerRanges(t *testing.T) {
	var r Reassembler
	now := time.Unix(1000, 0)
	key := PartialKey{netip.MustParseAddrPort("10.0.0.1:1"), 7}
	msg := []byte("abcdefghijkl")
	add := func(mo int, last bool, n int) (*Partial, AddResult) {
		return r.Add(key, uint32(mo), last, [][]byte{msg[mo : mo+n]}, 0, n, false, now, 4, 1<<20)
	}
	if p, res := add(8, true, 4); p != nil || res != AddOK {
		t.Fatal("last alone completed")
	}
	add(0, false, 4)
	if p, _ := add(0, false, 4); p != nil || r.Partials() != 1 {
		t.Fatal("duplicate changed the message")
	}
	if _, res := add(2, false, 4); res != AddBad || r.Partials() != 0 {
		t.Fatalf("partial overlap: %v, %d partials", res, r.Partials())
	}
	order := []int{4, 0, 8}
	for _, mo := range order {
		p, res := add(mo, mo == 8, 4)
		if mo == 8 {
			if p == nil || res != AddOK || string(p.Buf) != string(msg) {
				t.Fatalf("reassembled %v %v", p, res)
			}
			r.Release(p)
		} else if p != nil {
			t.Fatal("completed early")
		}
	}
	allocs := testing.AllocsPerRun(100, func() {
		for _, mo := range order {
			if p, _ := add(mo, mo == 8, 4); p != nil {
				r.Release(p)
			}
		}
	})
	if allocs != 0 {
		t.Fatalf("%v allocations per message, want 0", allocs)
	}
}

// FuzzReceivedMetadata: whatever the kernel (or a bug) leaves in a slot's
// control and name buffers, parsing it never panics.
func FuzzReceivedMetadata(f *testing.F) {
	var w [4]uint64
	cm := unsafe.Slice((*byte)(unsafe.Pointer(&w[0])), 32)
	h := (*unix.Cmsghdr)(unsafe.Pointer(&cm[0]))
	h.Level, h.Type = unix.SOL_UDP, unix.UDP_GRO
	h.SetLen(unix.CmsgLen(4))
	cm[unix.SizeofCmsghdr] = 0xc8
	f.Add(append([]byte(nil), cm...), 24, []byte{2, 0, 0x42, 0x68, 127, 0, 0, 1}, uint32(16))
	f.Add([]byte{}, 0, []byte{10, 0}, uint32(28))
	f.Fuzz(func(t *testing.T, control []byte, n int, name []byte, namelen uint32) {
		var cw [8]uint64
		c := unsafe.Slice((*byte)(unsafe.Pointer(&cw[0])), 64)
		copy(c, control)
		if n < 0 {
			n = -n
		}
		GROSegmentSize(c[:min(len(control), 64)], n)
		var raw unix.RawSockaddrInet6
		copy((*[unix.SizeofSockaddrInet6]byte)(unsafe.Pointer(&raw))[:], name)
		if a := GetSockaddr(&raw, namelen); a.IsValid() {
			var back unix.RawSockaddrInet6
			if got := GetSockaddr(&back, PutSockaddr(&back, a)); got != a {
				t.Fatalf("round trip %v -> %v", a, got)
			}
		}
	})
}
