package verbsd

import (
	"net/netip"
	"testing"
	"time"

	"github.com/iwarpd/iwarpd/proto"
	"github.com/iwarpd/iwarpd/verbsd/config"
	"github.com/iwarpd/iwarpd/verbsd/rnic"
)

// FuzzControlRequest feeds arbitrary bytes, as one control message, to the
// session dispatcher of a live engine: it must never panic, and every
// request gets a reply or an errno.
func FuzzControlRequest(f *testing.F) {
	cfg := config.DefaultConfig()
	cfg.UDPorts.First, cfg.UDPorts.Last = 33000, 33099
	cfg.RDPorts.First, cfg.RDPorts.Last = 0, 0
	srv, err := NewServer(cfg)
	if err != nil {
		f.Fatal(err)
	}
	f.Cleanup(func() { srv.Close() })
	msg := func(op proto.Op, body any) []byte {
		b, err := proto.Marshal(proto.Header{Version: proto.ABIVersion, Op: op, Seq: 1}, body)
		if err != nil {
			f.Fatal(err)
		}
		return b
	}
	f.Add(msg(proto.OpHello, proto.HelloRequest{ABI: proto.ABIVersion}))
	f.Add(msg(proto.OpAllocPD, nil))
	f.Add(msg(proto.OpDeallocPD, proto.Handle{Handle: 1}))
	f.Add(msg(proto.OpRegMR, proto.RegMRRequest{PD: 1, Length: 4096, Access: proto.AccessLocalWrite}))
	f.Add(msg(proto.OpCreateCQ, proto.CreateCQRequest{Depth: 8}))
	f.Add(msg(proto.OpCreateQP, proto.CreateQPRequest{PD: 1, Type: proto.QPTypeUD, Caps: proto.QPCaps{MaxSendWR: 8, MaxRecvWR: 8}}))
	f.Add(msg(proto.OpModifyQP, proto.ModifyQPRequest{QP: 1, State: proto.QPStateInit}))
	f.Add(msg(proto.OpCreateSRQ, proto.CreateSRQRequest{PD: 1, MaxWR: 8, MaxSGE: 1}))
	f.Add(msg(proto.OpInspect, nil))
	f.Add(msg(proto.OpQueryQP, proto.Handle{Handle: 3}))
	f.Add([]byte("IWRP"))
	f.Fuzz(func(t *testing.T, b []byte) {
		s := newSessionOf(srv, rnic.NewSession(srv.dev, nil))
		defer srv.eng.Do(func() error { srv.eng.TeardownSession(s.Session); return nil })
		// Half the inputs go to a session that already said hello.
		if len(b) > 0 && b[0]&1 == 0 {
			h, body, _ := proto.ParseHeader(msg(proto.OpHello, proto.HelloRequest{ABI: proto.ABIVersion}))
			if _, _, err, _ := s.dispatch(h, body, nil); err != nil {
				t.Fatal(err)
			}
			s.dispatch(proto.Header{Version: proto.ABIVersion, Op: proto.OpAllocPD}, nil, nil)
		}
		h, body, err := proto.ParseHeader(b)
		if err != nil {
			return
		}
		reply, _, err, _ := s.dispatch(h, body, nil)
		if err == nil && reply != nil {
			if _, merr := proto.Marshal(proto.Header{Op: h.Op | proto.OpReply}, reply); merr != nil {
				t.Fatalf("reply to %v does not encode: %v", h.Op, merr)
			}
		}
		if err != nil && rnic.ErrnoOf(err) == 0 {
			t.Fatalf("error without errno: %v", err)
		}
	})
}

func TestReassembler(t *testing.T) {
	var r reassembler
	now := time.Unix(1000, 0)
	src := netip.MustParseAddrPort("10.0.0.1:17000")
	data := []byte("0123456789abcdef")
	piece := func(s string) [][]byte { return [][]byte{[]byte(s)} }
	add := func(msn, mo uint32, last bool, s string) (*partial, addResult) {
		return r.add(partialKey{src, msn}, mo, last, piece(s), 0, len(s), false, now.Add(time.Second), 2, 1<<20)
	}
	if p, _ := add(1, 8, true, string(data[8:])); p != nil {
		t.Fatal("complete after the last segment alone")
	}
	if p, _ := add(1, 8, true, string(data[8:])); p != nil {
		t.Fatal("duplicate completed the message")
	}
	p, res := add(1, 0, false, string(data[:8]))
	if p == nil || res != addOK || string(p.buf) != string(data) {
		t.Fatalf("reassembled %v %v", p, res)
	}
	if r.partials() != 0 {
		t.Fatal("completed message still held")
	}
	// Overlap beyond the known total is bad.
	add(2, 8, true, "xxxx")
	if _, res := add(2, 10, false, "yyyyyyyy"); res != addBad {
		t.Fatalf("segment past the end: %v", res)
	}
	// Bounded: a third partial evicts the oldest.
	add(3, 4, true, "zz")
	add(4, 4, true, "zz")
	if _, res := add(5, 4, true, "zz"); res != addEvicted || r.partials() != 2 {
		t.Fatalf("eviction: %v, %d partials", res, r.partials())
	}
	if d, ok := r.nextDeadline(); !ok || !d.Equal(now.Add(time.Second)) {
		t.Fatalf("deadline %v %v", d, ok)
	}
	if n := r.expire(now.Add(2 * time.Second)); n != 2 || r.partials() != 0 {
		t.Fatalf("expired %d", n)
	}
}

func TestCopyHelpers(t *testing.T) {
	pieces := [][]byte{[]byte("ab"), []byte(""), []byte("cdef"), []byte("g")}
	var got []byte
	for _, p := range rnic.AppendRange(nil, pieces, 1, 5) {
		got = append(got, p...)
	}
	if string(got) != "bcdef" {
		t.Fatalf("appendRange = %q", got)
	}
	dst := make([]byte, 3)
	if n := rnic.CopyRange(dst, pieces, 4); n != 3 || string(dst) != "efg" {
		t.Fatalf("copyRange = %d %q", n, dst)
	}
	out := [][]byte{make([]byte, 2), make([]byte, 10)}
	if n := rnic.Scatter(out, []byte("hello")); n != 5 || string(out[0]) != "he" || string(out[1][:3]) != "llo" {
		t.Fatalf("scatter = %d %q", n, out)
	}
}
