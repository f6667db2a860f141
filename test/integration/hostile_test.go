package integration

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/iwarpd/iwarpd/ddp"
	"github.com/iwarpd/iwarpd/llp/dgram"
	"github.com/iwarpd/iwarpd/proto"
	"github.com/iwarpd/iwarpd/rdmap"
	"github.com/iwarpd/iwarpd/test/daemontest"
	"github.com/iwarpd/iwarpd/verbsd/verbsdtest"
	"golang.org/x/sys/unix"
)

// background keeps two good sessions of the daemon exchanging verified
// messages until stopped.
type background struct {
	rounds atomic.Int64
	stop   chan struct{}
	done   chan struct{}
	err    error
}

func startBackground(t *testing.T, d *daemon) *background {
	t.Helper()
	b1 := newEndpoint(t, "good-1", d.Open(t, "good-1"), endpointOpts{maxMsg: 4096, nslots: 2})
	b2 := newEndpoint(t, "good-2", d.Open(t, "good-2"), endpointOpts{maxMsg: 4096, nslots: 2})
	bg := &background{stop: make(chan struct{}), done: make(chan struct{})}
	sched := sizeSchedule{cycle: []int{0, 1, 100, 1450, 1451, 4000}}
	go func() {
		defer close(bg.done)
		for {
			select {
			case <-bg.stop:
				return
			default:
			}
			if _, err := pingPong(b1, b2, 10, sched, t.Logf); err != nil {
				bg.err = err
				return
			}
			bg.rounds.Add(10)
		}
	}()
	t.Cleanup(bg.end)
	return bg
}

func (bg *background) end() {
	select {
	case <-bg.stop:
	default:
		close(bg.stop)
	}
	<-bg.done
}

// progressed fails t unless the good clients complete more round trips
// (bounded wait) and never failed.
func (bg *background) progressed(t *testing.T, phase string) {
	t.Helper()
	from := bg.rounds.Load()
	eventually(t, "the good clients to keep exchanging ("+phase+")", 15*time.Second, func() bool {
		select {
		case <-bg.done:
			t.Fatalf("good clients failed during %s: %v", phase, bg.err)
		default:
		}
		return bg.rounds.Load() >= from+20
	})
}

// evil is the hostile raw client's session.
type evil struct {
	c    *verbsdtest.Client
	pd   uint32
	mr   *verbsdtest.MR
	caps proto.QPCaps
}

func newEvil(t *testing.T, d *daemon) *evil {
	t.Helper()
	c, err := verbsdtest.Dial(d.Sock, false)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	e := &evil{c: c, caps: proto.QPCaps{MaxSendWR: 64, MaxRecvWR: 64, MaxSendSGE: 2, MaxRecvSGE: 2, MaxInline: 64}}
	if e.pd, err = c.AllocPD(); err != nil {
		t.Fatal(err)
	}
	if e.mr, err = c.RegMR(e.pd, 1<<16, proto.AccessLocalWrite); err != nil {
		t.Fatal(err)
	}
	return e
}

// qp makes a UD QP in RTS with its own send and receive CQs.
func (e *evil) qp(t *testing.T) (*verbsdtest.QP, *verbsdtest.CQ, *verbsdtest.CQ) {
	t.Helper()
	scq, err := e.c.CreateCQ(256, 0)
	if err != nil {
		t.Fatal(err)
	}
	rcq, err := e.c.CreateCQ(256, 0)
	if err != nil {
		t.Fatal(err)
	}
	q, err := e.c.CreateQP(e.pd, scq, rcq, e.caps, verbsdtest.QPOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if err := q.ToRTS(); err != nil {
		t.Fatal(err)
	}
	return q, scq, rcq
}

func (e *evil) state(t *testing.T, q *verbsdtest.QP) proto.QPState {
	t.Helper()
	var r proto.QueryQPReply
	if _, err := e.c.Call(proto.OpQueryQP, proto.Handle{Handle: q.Handle}, &r); err != nil {
		t.Fatalf("query QP: %v", err)
	}
	return r.State
}

func waitCQEs(t *testing.T, cq *verbsdtest.CQ, n int, what string) []proto.CQE {
	t.Helper()
	got := cq.Wait(n, scaled(10*time.Second))
	if len(got) < n {
		t.Fatalf("%s: %d of %d completions: %+v", what, len(got), n, got)
	}
	return got
}

// TestHostileClient: a raw client posts garbage work requests, rewrites
// its send queue while the daemon reads it, sends malformed control
// messages, and forged and corrupted datagrams arrive from a plain UDP
// socket. The daemon stays up, answers with error completions, error
// replies and drop counters, and two other clients keep exchanging
// verified messages throughout.
func TestHostileClient(t *testing.T) {
	d := startDaemon(t, "hostile", daemontest.Options{})
	bg := startBackground(t, d)
	bg.progressed(t, "start")

	t.Run("WorkRequests", func(t *testing.T) { hostileWorkRequests(t, d) })
	d.CheckAlive(t)
	bg.progressed(t, "garbage work requests")

	t.Run("RewrittenWQE", func(t *testing.T) { rewrittenWQE(t, d) })
	d.CheckAlive(t)
	bg.progressed(t, "rewritten work requests")

	t.Run("ControlMessages", func(t *testing.T) { malformedControl(t, d) })
	d.CheckAlive(t)
	bg.progressed(t, "malformed control messages")

	t.Run("Datagrams", func(t *testing.T) { forgedDatagrams(t, d) })
	d.CheckAlive(t)
	bg.progressed(t, "forged datagrams")

	bg.end()
	if bg.err != nil {
		t.Fatalf("good clients: %v", bg.err)
	}
	t.Logf("the good clients completed %d round trips meanwhile", bg.rounds.Load())
}

func hostileWorkRequests(t *testing.T, d *daemon) {
	ev := newEvil(t, d)
	sink, _, sinkRCQ := ev.qp(t)
	ah, err := ev.c.CreateAH(ev.pd, sink.Addr)
	if err != nil {
		t.Fatal(err)
	}
	sge := ev.mr.SGE(0, 64)
	anyErr := []proto.WCStatus{proto.WCLocLenErr, proto.WCLocQPOpErr, proto.WCLocProtErr}
	cases := []struct {
		name string
		sqe  proto.SQE
		sges []proto.SGE
		want []proto.WCStatus
	}{
		{"bad lkey", proto.SQE{AH: ah}, []proto.SGE{{Addr: sge.Addr, Length: 8, LKey: sge.LKey ^ 0xff}}, []proto.WCStatus{proto.WCLocProtErr}},
		{"lkey zero", proto.SQE{AH: ah}, []proto.SGE{{Addr: sge.Addr, Length: 8}}, []proto.WCStatus{proto.WCLocProtErr}},
		{"sge past the region", proto.SQE{AH: ah}, []proto.SGE{ev.mr.SGE(1<<16-8, 9)}, []proto.WCStatus{proto.WCLocProtErr}},
		{"sge before the region", proto.SQE{AH: ah}, []proto.SGE{{Addr: sge.Addr - 1, Length: 8, LKey: sge.LKey}}, []proto.WCStatus{proto.WCLocProtErr}},
		{"sge wrapping the address space", proto.SQE{AH: ah}, []proto.SGE{{Addr: ^uint64(0) - 2, Length: 8, LKey: sge.LKey}}, []proto.WCStatus{proto.WCLocProtErr}},
		{"sge of 4 GiB", proto.SQE{AH: ah}, []proto.SGE{{Addr: sge.Addr, Length: ^uint32(0), LKey: sge.LKey}}, anyErr},
		{"unknown opcode", proto.SQE{Opcode: 99, AH: ah}, []proto.SGE{sge}, []proto.WCStatus{proto.WCLocQPOpErr}},
		{"rdma read on UD", proto.SQE{Opcode: proto.WRRDMARead, AH: ah}, []proto.SGE{sge}, []proto.WCStatus{proto.WCLocQPOpErr}},
		{"unknown flags", proto.SQE{Flags: 0x80, AH: ah}, []proto.SGE{sge}, []proto.WCStatus{proto.WCLocQPOpErr}},
		{"too many SGEs", proto.SQE{AH: ah, NumSGE: 3}, []proto.SGE{sge, sge}, []proto.WCStatus{proto.WCLocLenErr, proto.WCLocQPOpErr}},
		{"SGE count beyond the slot", proto.SQE{AH: ah, NumSGE: 60000}, []proto.SGE{sge}, []proto.WCStatus{proto.WCLocLenErr, proto.WCLocQPOpErr}},
		{"inline too long", proto.SQE{AH: ah, Flags: proto.SendInline, InlineLen: 65}, nil, []proto.WCStatus{proto.WCLocLenErr}},
		{"inline beyond the slot", proto.SQE{AH: ah, Flags: proto.SendInline, InlineLen: 1 << 30}, nil, []proto.WCStatus{proto.WCLocLenErr}},
	}
	for i, tc := range cases {
		q, scq, _ := ev.qp(t)
		e := tc.sqe
		e.WRID = uint64(100 + i)
		e.Flags |= proto.SendSignaled
		if err := q.PostSend(e, tc.sges, nil); err != nil {
			t.Fatal(err)
		}
		// A valid request behind it is flushed: the QP is in ERROR.
		if err := q.PostSend(proto.SQE{WRID: 1, AH: ah, Flags: proto.SendSignaled}, []proto.SGE{sge}, nil); err != nil {
			t.Fatal(err)
		}
		got := waitCQEs(t, scq, 2, tc.name)
		if !slices.Contains(tc.want, got[0].Status) || got[0].WRID != e.WRID || got[1].Status != proto.WCWRFlushErr || got[1].WRID != 1 {
			t.Errorf("%s: completions %+v, want status %v then a flush", tc.name, got, tc.want)
		}
		if s := ev.state(t, q); s != proto.QPStateError {
			t.Errorf("%s: QP state %v, want ERROR", tc.name, s)
		}
	}
	// Receive side: a receive into someone else's key, or beyond the
	// region, errors the receiving QP when a message arrives.
	recvCases := []struct {
		name string
		sges []proto.SGE
	}{
		{"receive with a bad lkey", []proto.SGE{{Addr: sge.Addr, Length: 100, LKey: sge.LKey ^ 0x5a}}},
		{"receive past the region", []proto.SGE{ev.mr.SGE(1<<16-50, 100)}},
	}
	for i, tc := range recvCases {
		q, _, rcq := ev.qp(t)
		if err := ev.c.PostRecv(q.RQ, uint64(200+i), tc.sges); err != nil {
			t.Fatal(err)
		}
		toQ, err := ev.c.CreateAH(ev.pd, q.Addr)
		if err != nil {
			t.Fatal(err)
		}
		if err := sink.PostSend(proto.SQE{WRID: 7, AH: toQ}, []proto.SGE{ev.mr.SGE(0, 10)}, nil); err != nil {
			t.Fatal(err)
		}
		got := waitCQEs(t, rcq, 1, tc.name)
		if got[0].Status != proto.WCLocProtErr || got[0].WRID != uint64(200+i) {
			t.Errorf("%s: completion %+v, want a protection error", tc.name, got[0])
		}
	}
	// The sink itself never received anything and is fine.
	if s := ev.state(t, sink); s != proto.QPStateRTS {
		t.Errorf("sink QP state %v", s)
	}
	if got := sinkRCQ.Poll(); len(got) != 0 {
		t.Errorf("sink completions %+v", got)
	}
}

// rewrittenWQE posts valid sends while another goroutine flips random bits
// of the send queue's slots through a second mapping of the region, so the
// daemon reads entries as they change under it. Any completion status is
// fine; the daemon must survive, and nothing may reach another session.
func rewrittenWQE(t *testing.T, d *daemon) {
	ev := newEvil(t, d)
	sink, _, _ := ev.qp(t)
	ah, err := ev.c.CreateAH(ev.pd, sink.Addr)
	if err != nil {
		t.Fatal(err)
	}
	sqBytes := proto.RingBytes(ev.caps.MaxSendWR, proto.SQEStride(ev.caps.MaxSendSGE, ev.caps.MaxInline))
	statuses := map[proto.WCStatus]int{}
	for round := range 20 {
		q, scq, _ := ev.qp(t)
		// A second mapping of the same pages: the race detector cannot
		// see the two writers (they are different addresses), and the
		// daemon sees both.
		alias, err := unix.Mmap(q.Region.FD(), 0, len(q.Region.Mem), unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
		if err != nil {
			t.Fatal(err)
		}
		var stop atomic.Bool
		var wg sync.WaitGroup
		wg.Add(1)
		go func() {
			defer wg.Done()
			r := rand.New(rand.NewPCG(uint64(round), 7))
			slots := alias[proto.RingHeaderLen:sqBytes]
			for i := 0; i < 50_000_000 && !stop.Load(); i++ {
				slots[r.IntN(len(slots))] ^= byte(1 << r.IntN(8))
				if i%64 == 0 {
					schedYield()
				}
			}
		}()
		posted := 0
		deadline := time.Now().Add(scaled(10 * time.Second))
		for posted < 100 && time.Now().Before(deadline) {
			err := q.PostSend(proto.SQE{WRID: uint64(posted), AH: ah, Flags: proto.SendSignaled}, []proto.SGE{ev.mr.SGE(posted%1000, 200)}, nil)
			switch {
			case err == nil:
				posted++
			case errors.Is(err, verbsdtest.ErrFull):
				time.Sleep(100 * time.Microsecond)
			default:
				t.Fatalf("post: %v", err)
			}
			for _, c := range scq.Poll() {
				statuses[c.Status]++
			}
		}
		stop.Store(true)
		wg.Wait()
		unix.Munmap(alias)
		// Let the engine finish what was published, then take the rest.
		quiet := 0
		for i := 0; i < 1000 && quiet < 20; i++ {
			got := scq.Poll()
			for _, c := range got {
				statuses[c.Status]++
			}
			if len(got) == 0 {
				quiet++
				time.Sleep(5 * time.Millisecond)
			} else {
				quiet = 0
			}
		}
		ev.state(t, q) // the daemon still answers about it
		d.CheckAlive(t)
		if _, err := ev.c.Call(proto.OpDestroyQP, proto.Handle{Handle: q.Handle}, nil); err != nil {
			t.Fatalf("destroy QP: %v", err)
		}
	}
	t.Logf("completions of rewritten work requests by status: %v", statuses)
	if len(statuses) == 0 {
		t.Error("no completion at all for rewritten work requests")
	}
}

// malformedControl sends broken control messages on a raw session: each
// gets an error reply, the session and the daemon go on.
func malformedControl(t *testing.T, d *daemon) {
	c, err := verbsdtest.Dial(d.Sock, false)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	seq := uint32(100)
	hdr := func(op proto.Op) []byte {
		seq++
		return proto.Header{Version: proto.ABIVersion, Op: op, Seq: seq}.Append(nil)
	}
	cases := []struct {
		name string
		msg  []byte
	}{
		{"one octet", []byte{0x49}},
		{"truncated header", hdr(proto.OpAllocPD)[:proto.HeaderLen-1]},
		{"bad magic", make([]byte, 32)},
		{"unknown op", hdr(999)},
		{"reply op", hdr(proto.OpAllocPD | proto.OpReply)},
		{"event op", hdr(proto.OpEvent)},
		{"hello again", append(hdr(proto.OpHello), `{"abi":1}`...)},
		{"bad json", append(hdr(proto.OpDeallocPD), "{nope"...)},
		{"unknown field", append(hdr(proto.OpDeallocPD), `{"handle":1,"x":2}`...)},
		{"trailing data", append(hdr(proto.OpDeallocPD), `{"handle":1} {}`...)},
		{"wrong type", append(hdr(proto.OpCreateCQ), `{"depth":"x"}`...)},
		{"CQ without its region", append(hdr(proto.OpCreateCQ), `{"depth":8}`...)},
		{"QP without its region", append(hdr(proto.OpCreateQP), `{"type":2,"caps":{"max_send_wr":8,"max_recv_wr":8}}`...)},
		{"zero-length MR", append(hdr(proto.OpRegMR), `{"pd":1,"length":0}`...)},
		{"MR without its region", append(hdr(proto.OpRegMR), `{"pd":1,"length":4096,"access":1}`...)},
		{"modify unknown QP", append(hdr(proto.OpModifyQP), `{"qp":77,"state":2}`...)},
	}
	// Every truncation of valid request bodies.
	for _, v := range []struct {
		op   proto.Op
		full string
	}{
		{proto.OpRegMR, `{"pd":1,"length":4096,"addr":140000000000,"access":1}`},
		{proto.OpCreateQP, `{"pd":1,"type":2,"send_cq":1,"recv_cq":1,"caps":{"max_send_wr":8,"max_recv_wr":8,"max_send_sge":1,"max_recv_sge":1}}`},
	} {
		op, full := v.op, v.full
		for n := 1; n < len(full); n++ {
			cases = append(cases, struct {
				name string
				msg  []byte
			}{fmt.Sprintf("%v body cut at %d", op, n), append(hdr(op), full[:n]...)})
		}
	}
	if _, err := c.AllocPD(); err != nil { // handle 1 exists: errors are about the message
		t.Fatal(err)
	}
	for _, tc := range cases {
		h, body, fds, err := c.RawBytes(tc.msg)
		if err != nil {
			t.Fatalf("%s: no reply: %v", tc.name, err)
		}
		var eb proto.ErrorBody
		if len(fds) != 0 || h.Status != unix.EINVAL || h.Op&proto.OpReply == 0 || proto.Unmarshal(body, &eb) != nil || eb.Error == "" {
			t.Errorf("%s: reply %+v %s, want EINVAL with an explanation", tc.name, h, body)
		}
	}
	// Random garbage: every message gets a reply, whatever it says.
	r := rand.New(rand.NewPCG(1, 2))
	for i := range 300 {
		var msg []byte
		if i%2 == 0 {
			msg = hdr(proto.Op(r.IntN(int(proto.OpInspect) + 3)))
		}
		for range 1 + r.IntN(120) {
			msg = append(msg, byte(r.Uint32()))
		}
		if _, _, _, err := c.RawBytes(msg); err != nil {
			t.Fatalf("garbage message %d (% x): no reply: %v", i, msg, err)
		}
	}
	// The session still works.
	if _, err := c.AllocPD(); err != nil {
		t.Fatalf("session after malformed messages: %v", err)
	}
	// A session that skips Hello, and one of another ABI, are refused
	// with an error (never served).
	raw, err := proto.Dial(d.Sock)
	if err != nil {
		t.Fatal(err)
	}
	defer raw.Close()
	if err := raw.Send(proto.Header{Version: proto.ABIVersion, Op: proto.OpAllocPD, Seq: 1}, nil); err != nil {
		t.Fatal(err)
	}
	raw.UnixConn().SetReadDeadline(time.Now().Add(scaled(10 * time.Second)))
	if h, _, _, err := raw.Receive(); err == nil && h.Status == 0 {
		t.Errorf("a request before Hello was served: %+v", h)
	}
	old, err := proto.Dial(d.Sock)
	if err != nil {
		t.Fatal(err)
	}
	defer old.Close()
	if err := old.Send(proto.Header{Version: proto.ABIVersion + 1, Op: proto.OpHello, Seq: 1}, proto.HelloRequest{ABI: proto.ABIVersion + 1}); err != nil {
		t.Fatal(err)
	}
	old.UnixConn().SetReadDeadline(time.Now().Add(scaled(10 * time.Second)))
	if h, _, _, err := old.Receive(); err != nil || h.Status != unix.EPROTO {
		t.Errorf("hello of another ABI: %+v %v, want EPROTO", h, err)
	}
}

// datagram builds a UD datagram by hand, naming the Q_Key verbsdtest QPs
// have (the hostile session's; the good clients' keys are random).
func datagram(h ddp.Header, payload []byte, crc bool) []byte {
	return dgram.AppendUD(nil, dgram.Keys{QKey: verbsdtest.TestQKey, SrcQKey: 1}, crc, h.Append(nil), payload)
}

func sendHeader(op rdmap.Opcode, msn, mo uint32, last bool) ddp.Header {
	return ddp.Header{Version: ddp.Version, Last: last, ULPControl: uint8(rdmap.MakeControl(op)), QN: 0, MSN: msn, MO: mo}
}

// forgedDatagrams sends bad datagrams from a plain UDP socket to a QP of
// the hostile session and to a busy QP of a good client: all are dropped
// and counted by reason, and the good client keeps going.
func forgedDatagrams(t *testing.T, d *daemon) {
	ev := newEvil(t, d)
	target, _, rcq := ev.qp(t)

	good := datagram(sendHeader(rdmap.OpSend, 1, 0, true), []byte("hello iwarp"), true)
	corrupt := slices.Clone(good)
	corrupt[28] ^= 1 // a payload octet
	noCRC := good[:len(good)-4]
	badVersion := sendHeader(rdmap.OpSend, 1, 0, true)
	badVersion.Version = 2
	badQN := sendHeader(rdmap.OpSend, 1, 0, true)
	badQN.QN = 1
	tagged := ddp.Header{Tagged: true, Last: true, Version: ddp.Version, ULPControl: uint8(rdmap.MakeControl(rdmap.OpWrite)), Stag: 1}
	bad := []struct {
		counter string
		b       []byte
	}{
		{"drop_truncated", []byte{1, 2, 3}},
		{"drop_truncated", good[:10]},
		{"drop_crc", corrupt},
		{"drop_crc", noCRC},
		{"drop_crc", append(slices.Clone(good[:len(good)-4]), 0, 0, 0, 0)},
		{"drop_bad_version", datagram(badVersion, []byte("x"), true)},
		{"drop_bad_qn", datagram(badQN, []byte("x"), true)},
		{"drop_tagged", datagram(tagged, []byte("x"), true)},
		{"drop_bad_opcode", datagram(sendHeader(rdmap.OpReadRequest, 1, 0, true), make([]byte, 28), true)},
		{"drop_bad_opcode", datagram(sendHeader(rdmap.OpTerminate, 1, 0, true), make([]byte, 28), true)},
		{"drop_bad_segment", datagram(sendHeader(rdmap.OpSend, 2, 1<<30, true), []byte("x"), true)},
	}
	// The busy good QP: take it from iwarpctl (a QP of session good-1).
	var goodAddr string
	for _, s := range d.sessions(t) {
		if s.Client == "good-1" && len(s.QPs) == 1 {
			goodAddr = s.QPs[0].Addr
		}
	}
	if goodAddr == "" {
		t.Fatal("iwarpctl does not list the good client's QP")
	}
	// One receive posted on the target: a UD QP reads its socket only
	// while it has receives (the datagrams wait in the socket otherwise,
	// docs/iwarpd.md "UD receive backlog"). None of the bad datagrams
	// consumes it; the well-formed one at the end does.
	if err := ev.c.PostRecv(target.RQ, 9, []proto.SGE{ev.mr.SGE(0, 100)}); err != nil {
		t.Fatal(err)
	}
	before := d.counters(t)
	goodBefore := d.qpCounters(t, goodAddr)
	want := map[string]int64{}
	for _, to := range []string{target.Addr, goodAddr} {
		conn, err := net.Dial("udp", to)
		if err != nil {
			t.Fatal(err)
		}
		for round := range 3 {
			for _, f := range bad {
				if _, err := conn.Write(f.b); err != nil {
					t.Fatal(err)
				}
				if to == target.Addr && round == 0 {
					want[f.counter]++
				}
			}
		}
		conn.Close()
	}
	// Per QP, exactly what was sent (×3 for the repeated rounds).
	var got map[string]int64
	eventually(t, "the target QP to count every datagram", 10*time.Second, func() bool {
		got = d.qpCounters(t, target.Addr)
		return got["datagrams_in"] >= int64(3*len(bad))
	})
	for name, n := range want {
		n *= 3
		if got[name] != n {
			t.Errorf("target QP counter %s = %d, want %d (all: %v)", name, got[name], n, got)
		}
	}
	if len(rcq.Poll()) != 0 {
		t.Error("a forged datagram completed on the target")
	}
	if s := ev.state(t, target); s != proto.QPStateRTS {
		t.Errorf("target QP state %v after forged datagrams", s)
	}
	var goodAfter map[string]int64
	eventually(t, "the good QP to count the forged datagrams", 10*time.Second, func() bool {
		goodAfter = d.qpCounters(t, goodAddr)
		// The good QP's Q_Key is random: none of them got past the key
		// (but the two too short to hold one).
		return goodAfter["drop_qkey"]-goodBefore["drop_qkey"]+goodAfter["drop_truncated"]-goodBefore["drop_truncated"] >= int64(3*len(bad))
	})
	for _, name := range []string{"drop_crc", "drop_bad_segment", "drop_bad_version"} {
		if goodAfter[name] != goodBefore[name] {
			t.Errorf("good QP counter %s moved (%d -> %d): a datagram without its Q_Key got past the key check", name, goodBefore[name], goodAfter[name])
		}
	}
	after := d.counters(t)
	for name := range want {
		if after[name]-before[name] < 3*want[name] {
			t.Errorf("global counter %s grew by %d, want at least %d", name, after[name]-before[name], 3*want[name])
		}
	}
	// A forged but well-formed message that names the target's Q_Key is
	// delivered once a receive is posted (the key is UD's only
	// authentication): it lands intact, in the receive posted above.
	conn, err := net.Dial("udp", target.Addr)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	conn.Write(datagram(sendHeader(rdmap.OpSend, 2, 0, true), []byte("stranger"), true))
	c := waitCQEs(t, rcq, 1, "well-formed datagram")[0]
	if c.Status != proto.WCSuccess || c.ByteLen != 8 || string(ev.mr.Buf[:8]) != "stranger" || c.Src.String() != conn.LocalAddr().String() {
		t.Errorf("completion %+v, buffer %q", c, ev.mr.Buf[:8])
	}
}
