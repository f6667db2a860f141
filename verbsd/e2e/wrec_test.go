package e2e

import (
	"bytes"
	"encoding/binary"
	"errors"
	"net/netip"
	"slices"
	"sync/atomic"
	"testing"
	"time"
	"unsafe"

	"github.com/iwarpd/iwarpd/ddp"
	"github.com/iwarpd/iwarpd/internal/crc32c"
	"github.com/iwarpd/iwarpd/llp/dgram"
	"github.com/iwarpd/iwarpd/proto"
	"github.com/iwarpd/iwarpd/rdmap"
	"github.com/iwarpd/iwarpd/verbsd/config"
	"github.com/iwarpd/iwarpd/verbsd/rnic"
	"github.com/iwarpd/iwarpd/verbsd/ud"
	"github.com/iwarpd/iwarpd/verbsd/verbsdtest"
	"golang.org/x/sys/unix"
)

// wrecTarget is a UD node plus a region remote peers may write.
type wrecTarget struct {
	*fastNode
	tgt *verbsdtest.MR
}

func newWrecTarget(t *testing.T, path string, size int, access proto.Access) *wrecTarget {
	t.Helper()
	n := newFastNode(t, path, 1<<16)
	tgt, err := n.c.RegMR(n.pd, size, access)
	if err != nil {
		t.Fatal(err)
	}
	return &wrecTarget{n, tgt}
}

func postWriteRecord(t *testing.T, a *fastNode, ah proto.AddressVector, wrid uint64, rkey uint32, to uint64, off, size int) {
	t.Helper()
	e := proto.SQE{WRID: wrid, Opcode: proto.WRWriteRecord, Flags: proto.SendSignaled, AH: ah, RKey: rkey, RemoteAddr: to}
	for {
		err := a.qp.PostSend(e, []proto.SGE{a.mr.SGE(off, size)}, nil)
		if err == nil {
			return
		}
		if !errors.Is(err, verbsdtest.ErrFull) {
			t.Fatal(err)
		}
		time.Sleep(10 * time.Microsecond)
	}
}

func waitOne(t *testing.T, cq *verbsdtest.CQ, what string) proto.CQE {
	t.Helper()
	got := cq.Wait(1, 10*time.Second)
	if len(got) != 1 {
		t.Fatalf("%s: %d completions, want 1", what, len(got))
	}
	return got[0]
}

type wrange struct{ off, len uint32 }

// parseRecord decodes a record written into a receive buffer.
func parseRecord(t *testing.T, b []byte) []wrange {
	t.Helper()
	n := binary.LittleEndian.Uint32(b)
	var r []wrange
	for i := range int(n) {
		o := 4 + 8*i
		r = append(r, wrange{binary.LittleEndian.Uint32(b[o:]), binary.LittleEndian.Uint32(b[o+4:])})
	}
	return r
}

func TestWriteRecordUDSizes(t *testing.T) {
	_, path := startFast(t, nil)
	a := newFastNode(t, path, 2<<20)
	b := newWrecTarget(t, path, 2<<20, proto.AccessLocalWrite|proto.AccessRemoteWrite)
	ah, err := a.c.CreateAH(a.pd, b.qp.Addr)
	if err != nil {
		t.Fatal(err)
	}
	const base = 5 // an unaligned tagged offset
	for i, size := range []int{0, 1, 100, 1396, 1397, 4200, 100000, 1 << 20} {
		src := a.mr.Buf[:size]
		for j := range src {
			src[j] = byte(j*7 + i*13 + j>>9)
		}
		clear(b.tgt.Buf)
		for j := range b.mr.Buf[:64] {
			b.mr.Buf[j] = 0xee
		}
		if err := b.c.PostRecv(b.qp.RQ, uint64(100+i), []proto.SGE{b.mr.SGE(0, 64)}); err != nil {
			t.Fatal(err)
		}
		to := b.tgt.Addr(base)
		postWriteRecord(t, a, ah, uint64(i), b.tgt.RKey, to, 0, size)
		sc := waitOne(t, a.scq, "send")
		if sc.Status != proto.WCSuccess || sc.Opcode != proto.WCWriteRecord || int(sc.ByteLen) != size || sc.WRID != uint64(i) {
			t.Fatalf("size %d: send completion %+v", size, sc)
		}
		rc := waitOne(t, b.rcq, "record")
		if rc.Status != proto.WCSuccess || rc.Opcode != proto.WCRecvWriteRecord || rc.WRID != uint64(100+i) ||
			int(rc.ByteLen) != size || rc.InvStag != b.tgt.RKey || rc.TO != to || rc.Src.String() != a.qp.Addr ||
			rc.Flags&proto.WCFlagRecordTrim != 0 || rc.Flags&proto.WCFlagSrcValid == 0 || rc.QPN != b.qp.QPN {
			t.Fatalf("size %d: record completion %+v (want src %s stag %#x to %#x)", size, rc, a.qp.Addr, b.tgt.RKey, to)
		}
		want := []wrange{{0, uint32(size)}}
		if size == 0 {
			want = nil
		}
		if got := parseRecord(t, b.mr.Buf); !equalRanges(got, want) {
			t.Fatalf("size %d: record %v, want %v", size, got, want)
		}
		if !bytes.Equal(b.tgt.Buf[base:base+size], src) {
			t.Fatalf("size %d: target buffer differs", size)
		}
		if b.tgt.Buf[base-1] != 0 || b.tgt.Buf[base+size] != 0 {
			t.Fatalf("size %d: octets around the target written", size)
		}
	}
	if c := qpStats(t, path, b.qp.QPN); c["wrec_complete"] != 8 || c["wrec_trimmed"] != 0 || c["wrec_access_errors"] != 0 {
		t.Errorf("target counters: %v", c)
	}
}

func equalRanges(a, b []wrange) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// TestWriteRecordAccessViolations: a bad STag, a range past the region, a
// region without RemoteWrite: nothing is placed, no completion at the
// target, one error message per record reaches the sender (counter and
// EventQPAccessError), and both QPs go on working.
func TestWriteRecordAccessViolations(t *testing.T) {
	_, path := startFast(t, nil)
	a := newFastNode(t, path, 1<<20)
	b := newWrecTarget(t, path, 64<<10, proto.AccessLocalWrite|proto.AccessRemoteWrite)
	noRW, err := b.c.RegMR(b.pd, 64<<10, proto.AccessLocalWrite)
	if err != nil {
		t.Fatal(err)
	}
	ah, err := a.c.CreateAH(a.pd, b.qp.Addr)
	if err != nil {
		t.Fatal(err)
	}
	if err := b.c.PostRecv(b.qp.RQ, 7, []proto.SGE{b.mr.SGE(0, 64)}); err != nil {
		t.Fatal(err)
	}
	for j := range a.mr.Buf[:20000] {
		a.mr.Buf[j] = byte(j | 1)
	}
	cases := []struct {
		name string
		rkey uint32
		to   uint64
		size int
	}{
		{"bad stag", b.tgt.RKey ^ 0x7f000000, b.tgt.Addr(0), 5000},
		{"bounds", b.tgt.RKey, b.tgt.Addr(64<<10 - 100), 5000}, // the first segment fits, the later ones not
		{"bounds before", b.tgt.RKey, b.tgt.Addr(0) - 1, 10},
		{"no remote write", noRW.RKey, noRW.Addr(0), 3000},
	}
	for i, tc := range cases {
		postWriteRecord(t, a, ah, uint64(i), tc.rkey, tc.to, 0, tc.size)
		if sc := waitOne(t, a.scq, tc.name); sc.Status != proto.WCSuccess {
			t.Fatalf("%s: send completion %+v", tc.name, sc)
		}
		deadline := time.Now().Add(10 * time.Second)
		for qpStats(t, path, a.qp.QPN)["error_msgs_in"] < int64(i+1) {
			if time.Now().After(deadline) {
				t.Fatalf("%s: no error message reached the sender: %v", tc.name, qpStats(t, path, a.qp.QPN))
			}
			time.Sleep(time.Millisecond)
		}
	}
	time.Sleep(50 * time.Millisecond)
	if got := b.rcq.Poll(); len(got) != 0 {
		t.Fatalf("target completions after violations: %+v", got)
	}
	for j, x := range b.tgt.Buf {
		if x != 0 && !(j >= 64<<10-100) {
			t.Fatalf("octet %d of the target written", j)
		}
	}
	// "bounds": the first segment (1396 octets from 100 before the end)
	// does not fit either: nothing placed at all.
	if !bytes.Equal(b.tgt.Buf[64<<10-100:], make([]byte, 100)) || !bytes.Equal(noRW.Buf[:3000], make([]byte, 3000)) {
		t.Fatal("a refused segment was placed")
	}
	ca, cb := qpStats(t, path, a.qp.QPN), qpStats(t, path, b.qp.QPN)
	if ca["error_msgs_in"] != 4 || cb["error_msgs_out"] != 4 || cb["wrec_access_errors"] < 4 || cb["wrec_segments_placed"] != 0 {
		t.Errorf("counters: sender %v target %v", ca, cb)
	}
	// The sender heard of it as events.
	deadline := time.Now().Add(5 * time.Second)
	for {
		a.c.Call(proto.OpQueryDevice, nil, nil) // lets the client read pending events
		n := 0
		for _, ev := range a.c.Events {
			if ev.Type == proto.EventQPAccessError && ev.Handle == a.qp.Handle {
				n++
			}
		}
		if n == 4 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d access-error events, want 4: %+v", n, a.c.Events)
		}
		time.Sleep(5 * time.Millisecond)
	}
	// Both QPs are still up: a good Write-Record completes.
	postWriteRecord(t, a, ah, 99, b.tgt.RKey, b.tgt.Addr(0), 0, 3000)
	waitOne(t, a.scq, "good send")
	if rc := waitOne(t, b.rcq, "good record"); rc.Status != proto.WCSuccess || rc.ByteLen != 3000 || rc.WRID != 7 {
		t.Fatalf("record after violations: %+v", rc)
	}
	if !bytes.Equal(b.tgt.Buf[:3000], a.mr.Buf[:3000]) {
		t.Fatal("good record not placed")
	}
}

// iovBytes returns the octets of iovec i of msghdr h.
func iovBytes(h *unix.Msghdr, i int) []byte {
	iov := unsafe.Slice(h.Iov, h.Iovlen)[i]
	return unsafe.Slice(iov.Base, iov.Len)
}

// TestWriteRecordLoss: segment 2 of 5 is lost on the way (the engine's
// sendmmsg hook drops it): after the reassembly timeout the record
// completes with RecordTrim and exactly the ranges placed; those hold the
// data and the hole is untouched.
func TestWriteRecordLoss(t *testing.T) {
	srv, path := startFast(t, func(c *config.Config) { c.GSO = false; c.ReassemblyTimeout = 50 * time.Millisecond })
	var dropped atomic.Int32
	setSendmmsg(srv, func(fd int, msgs []unix.Mmsghdr) (int, error) { // engines_internal_test.go
		sent := 0
		for i := range msgs {
			hdr := iovBytes(&msgs[i].Hdr, 0)
			if len(hdr) >= dgram.KeyHeaderLen+26 {
				hdr = hdr[dgram.KeyHeaderLen:]
			}
			if len(hdr) >= 26 && hdr[0]&0x80 != 0 && hdr[1]&0x0f == 0xc && binary.BigEndian.Uint32(hdr[22:]) != 0 &&
				binary.BigEndian.Uint32(hdr[22:]) == uint32(ud.EngOf(srv.Device().Engs[0]).MaxPayloadWriteRecord(proto.WRWriteRecord)) {
				dropped.Add(1)
				sent++
				continue
			}
			n, err := ud.SysSendmmsg(fd, msgs[i:i+1])
			if n != 1 {
				return sent, err
			}
			sent++
		}
		return sent, nil
	})
	a := newFastNode(t, path, 1<<20)
	b := newWrecTarget(t, path, 1<<20, proto.AccessLocalWrite|proto.AccessRemoteWrite)
	ah, err := a.c.CreateAH(a.pd, b.qp.Addr)
	if err != nil {
		t.Fatal(err)
	}
	p := ud.EngOf(srv.Device().Engs[0]).MaxPayloadWriteRecord(proto.WRWriteRecord)
	size := 4*p + 77 // 5 segments
	for j := range a.mr.Buf[:size] {
		a.mr.Buf[j] = byte(j*3 + 1)
	}
	for j := range b.tgt.Buf {
		b.tgt.Buf[j] = 0xee
	}
	if err := b.c.PostRecv(b.qp.RQ, 1, []proto.SGE{b.mr.SGE(0, 64)}); err != nil {
		t.Fatal(err)
	}
	const base = 1000
	start := time.Now()
	postWriteRecord(t, a, ah, 1, b.tgt.RKey, b.tgt.Addr(base), 0, size)
	waitOne(t, a.scq, "send")
	rc := waitOne(t, b.rcq, "record")
	if time.Since(start) < 40*time.Millisecond {
		t.Errorf("trimmed record completed after %v, before the reassembly timeout", time.Since(start))
	}
	if rc.Status != proto.WCSuccess || rc.Opcode != proto.WCRecvWriteRecord || rc.Flags&proto.WCFlagRecordTrim == 0 ||
		int(rc.ByteLen) != size || rc.TO != b.tgt.Addr(base) || rc.InvStag != b.tgt.RKey {
		t.Fatalf("completion %+v", rc)
	}
	want := []wrange{{0, uint32(p)}, {uint32(2 * p), uint32(size - 2*p)}}
	if got := parseRecord(t, b.mr.Buf); !equalRanges(got, want) || dropped.Load() != 1 {
		t.Fatalf("record %v (dropped %d), want %v", got, dropped.Load(), want)
	}
	for _, r := range want {
		if !bytes.Equal(b.tgt.Buf[base+r.off:base+r.off+r.len], a.mr.Buf[r.off:r.off+r.len]) {
			t.Fatalf("range %v does not hold the data", r)
		}
	}
	if !bytes.Equal(b.tgt.Buf[base+p:base+2*p], bytes.Repeat([]byte{0xee}, p)) {
		t.Fatal("the hole was written")
	}
	if b.tgt.Buf[base-1] != 0xee || b.tgt.Buf[base+size] != 0xee {
		t.Fatal("octets around the message written")
	}
	time.Sleep(100 * time.Millisecond)
	if got := b.rcq.Poll(); len(got) != 0 {
		t.Fatalf("a second completion: %+v", got)
	}
	if c := qpStats(t, path, b.qp.QPN); c["wrec_trimmed"] != 1 || c["wrec_segments_placed"] != 4 {
		t.Errorf("target counters %v", c)
	}
}

// FuzzWriteRecordDatagram sends arbitrary DDP segments (the tagged bit
// forced, a valid CRC appended) to a live UD QP that has a remotely
// writable region and posted receives: the engine must never panic and the
// QP must stay in RTS.
func FuzzWriteRecordDatagram(f *testing.F) {
	srv, path := serve(f, false, func(c *config.Config) { c.ReassemblyTimeout = time.Millisecond })
	c, err := verbsdtest.Dial(path, false)
	if err != nil {
		f.Fatal(err)
	}
	f.Cleanup(c.Close)
	pd, _ := c.AllocPD()
	buf, _ := c.RegMR(pd, 4096, proto.AccessLocalWrite)
	tgt, err := c.RegMR(pd, 8192, proto.AccessLocalWrite|proto.AccessRemoteWrite)
	if err != nil {
		f.Fatal(err)
	}
	scq, _ := c.CreateCQ(64, 0)
	rcq, _ := c.CreateCQ(1024, 0)
	q, err := c.CreateQP(pd, scq, rcq, proto.QPCaps{MaxSendWR: 8, MaxRecvWR: 512, MaxSendSGE: 1, MaxRecvSGE: 1}, verbsdtest.QPOptions{})
	if err != nil {
		f.Fatal(err)
	}
	if err := q.ToRTS(); err != nil {
		f.Fatal(err)
	}
	for i := range 256 {
		c.PostRecv(q.RQ, uint64(i), []proto.SGE{buf.SGE(i*16, 16)})
	}
	dst, err := netip.ParseAddrPort(q.Addr)
	if err != nil {
		f.Fatal(err)
	}
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		f.Fatal(err)
	}
	f.Cleanup(func() { unix.Close(fd) })
	seg := func(stag uint32, to uint64, id, mlen, mo uint32, last bool, payload []byte) []byte {
		h := ddp.Header{Tagged: true, Last: last, Version: ddp.Version, ULPControl: uint8(rdmap.MakeControl(rdmap.OpWriteRecord)),
			Stag: stag, TO: to}
		b := h.Append(nil)
		w := rdmap.WriteRecord{RecordID: id, MessageLength: mlen, MessageOffset: mo}
		return append(w.Append(b), payload...)
	}
	f.Add(seg(tgt.RKey, tgt.Addr(0), 1, 5, 0, true, []byte("hello")))
	f.Add(seg(tgt.RKey, tgt.Addr(100), 2, 10, 5, true, []byte("world")))
	f.Add(seg(tgt.RKey, tgt.Addr(8190), 3, 5, 0, true, []byte("bound")))
	f.Add(seg(tgt.RKey^0x100, tgt.Addr(0), 4, 0, 0, true, nil))
	// The same as a Write-Record with Immediate (opcode 0xD), whole and cut
	// inside its Immediate Data.
	withImm := func(b []byte, imm uint32) []byte {
		d := rdmap.MakeImmediateData(imm)
		b = slices.Concat(b[:ud.WrecHeaderLen], d.Raw[:], b[ud.WrecHeaderLen:])
		b[1] = uint8(rdmap.MakeControl(rdmap.OpWriteRecordImm))
		return b
	}
	f.Add(withImm(seg(tgt.RKey, tgt.Addr(0), 5, 5, 0, true, []byte("hello")), 0xcafe))
	f.Add(withImm(seg(tgt.RKey, tgt.Addr(0), 6, 0, 0, true, nil), 1)[:ud.WrecHeaderLen+3])
	f.Fuzz(func(t *testing.T, b []byte) {
		if len(b) == 0 {
			return
		}
		d := append(dgram.Keys{QKey: verbsdtest.TestQKey, SrcQKey: 1}.Append(nil), b...)
		d[dgram.KeyHeaderLen] |= 0x80
		d = crc32c.Append(d, crc32c.Checksum(d))
		unix.Sendto(fd, d, 0, rnic.AddrToSockaddr(dst))
		var st proto.QPState
		srv.Device().Engs[0].Do(func() error { st = allQPs(srv)[0].State; return nil })
		if st != proto.QPStateRTS {
			t.Fatalf("QP left RTS: %v", st)
		}
	})
}
