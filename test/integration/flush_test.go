package integration

import (
	"fmt"
	"testing"
	"time"

	"github.com/iwarpd/iwarpd/ofverbs"
	"github.com/iwarpd/iwarpd/test/daemontest"
)

// The flush of a QP in ERROR (verbsd/rnic/flush.go): every work request
// still posted completes with WCWRFlushErr, with its own wr_id and the
// opcode it was posted with, in posting order per queue (ibv_modify_qp(3),
// ibv_poll_cq(3): "the opcode ... of a flushed work completion"); receives
// posted to an SRQ are not the erroring QP's and stay for the SRQ's other
// QPs. One daemon per transport, one ofverbs client.

// rdFlushPorts: RD port blocks of the flush test (19800-19899; nothing else
// in this package takes ports of 19800-19999).
var rdFlushPorts = daemontest.Blocks{Base: 19800, Size: 10, Count: 10}

// flushCase is a work request to post on a QP in ERROR and the completion
// opcode its flush must carry.
type flushCase struct {
	name string
	wr   ofverbs.SendWR
	want ofverbs.WCOpcode
}

// flushSends are the send work requests of every opcode typ takes, each
// signaled; the datagram QPs' carry ah. The flush must not look at what the
// work request names, only at its opcode and wr_id.
func flushSends(typ ofverbs.QPType, f *flushEnd, ah *ofverbs.AH) []flushCase {
	sge := f.mr.SGE(f.mem[0:64])
	res := f.mr.SGE(f.mem[64:72])
	raddr, rkey := f.mr.Addr()+128, f.mr.RKey()
	send := func(name string, op ofverbs.SendOpcode, se bool, want ofverbs.WCOpcode) flushCase {
		return flushCase{name, ofverbs.SendWR{Opcode: op, Solicited: se, SGL: []ofverbs.SGE{sge}, Imm: 0x1234}, want}
	}
	rma := func(name string, op ofverbs.SendOpcode, want ofverbs.WCOpcode) flushCase {
		return flushCase{name, ofverbs.SendWR{Opcode: op, SGL: []ofverbs.SGE{sge}, RKey: rkey, RemoteAddr: raddr, Imm: 0x5678}, want}
	}
	atomic := func(name string, op ofverbs.SendOpcode, want ofverbs.WCOpcode) flushCase {
		return flushCase{name, ofverbs.SendWR{Opcode: op, SGL: []ofverbs.SGE{res}, RKey: rkey, RemoteAddr: raddr, CompareAdd: 1, Swap: 2}, want}
	}
	var cs []flushCase
	cs = append(cs,
		send("Send", ofverbs.WRSend, false, ofverbs.WCSend),
		send("SendSE", ofverbs.WRSend, true, ofverbs.WCSend),
		send("SendWithImm", ofverbs.WRSendWithImm, false, ofverbs.WCSend),
		send("SendWithImmSE", ofverbs.WRSendWithImm, true, ofverbs.WCSend))
	switch typ {
	case ofverbs.QPTypeUD:
		cs = append(cs,
			rma("WriteRecord", ofverbs.WRWriteRecord, ofverbs.WCWriteRecord),
			rma("WriteRecordWithImm", ofverbs.WRWriteRecordWithImm, ofverbs.WCWriteRecord))
	case ofverbs.QPTypeRD:
		cs = append(cs,
			rma("Read", ofverbs.WRRDMARead, ofverbs.WCRDMARead),
			atomic("FetchAdd", ofverbs.WRFetchAdd, ofverbs.WCFetchAdd),
			atomic("CmpSwap", ofverbs.WRCmpSwap, ofverbs.WCCmpSwap),
			rma("WriteRecord", ofverbs.WRWriteRecord, ofverbs.WCWriteRecord),
			rma("WriteRecordWithImm", ofverbs.WRWriteRecordWithImm, ofverbs.WCWriteRecord))
	case ofverbs.QPTypeRC:
		inv := send("SendInvalidate", ofverbs.WRSendInvalidate, false, ofverbs.WCSend)
		inv.wr.InvStag = rkey
		invSE := send("SendInvalidateSE", ofverbs.WRSendInvalidate, true, ofverbs.WCSend)
		invSE.wr.InvStag = rkey
		cs = append(cs, inv, invSE,
			rma("Write", ofverbs.WRRDMAWrite, ofverbs.WCRDMAWrite),
			rma("WriteWithImm", ofverbs.WRWriteWithImm, ofverbs.WCRDMAWrite),
			rma("Read", ofverbs.WRRDMARead, ofverbs.WCRDMARead),
			atomic("FetchAdd", ofverbs.WRFetchAdd, ofverbs.WCFetchAdd),
			atomic("CmpSwap", ofverbs.WRCmpSwap, ofverbs.WCCmpSwap))
	}
	for i := range cs {
		cs[i].wr.ID = uint64(1000 + i)
		cs[i].wr.Signaled = true
		cs[i].wr.AH = ah
	}
	return cs
}

// flushEnd is a QP with one registered buffer and its CQs; with srq set
// its receives come from srq.
type flushEnd struct {
	pd       *ofverbs.PD
	mem      []byte
	mr       *ofverbs.MR
	scq, rcq *ofverbs.CQ
	qp       *ofverbs.QP
}

func newFlushEnd(t *testing.T, ctx *ofverbs.Context, pd *ofverbs.PD, typ ofverbs.QPType, srq *ofverbs.SRQ) *flushEnd {
	t.Helper()
	f := &flushEnd{pd: pd}
	buf, err := ctx.AllocBuffer(4096)
	if err != nil {
		t.Fatal(err)
	}
	f.mem = buf.Bytes()
	if f.mr, err = pd.RegMR(f.mem, ofverbs.AccessLocalWrite|ofverbs.AccessRemoteWrite|ofverbs.AccessRemoteRead|ofverbs.AccessRemoteAtomic); err != nil {
		t.Fatal(err)
	}
	if f.scq, err = ctx.CreateCQ(64, nil); err != nil {
		t.Fatal(err)
	}
	if f.rcq, err = ctx.CreateCQ(64, nil); err != nil {
		t.Fatal(err)
	}
	if f.qp, err = pd.CreateQP(ofverbs.QPInitAttr{Type: typ, SendCQ: f.scq, RecvCQ: f.rcq, SRQ: srq,
		Cap: ofverbs.QPCap{MaxSendWR: 32, MaxRecvWR: 32, MaxSendSGE: 1, MaxRecvSGE: 1}}); err != nil {
		t.Fatal(err)
	}
	states := []ofverbs.QPState{ofverbs.QPStateInit, ofverbs.QPStateRTR, ofverbs.QPStateRTS}
	if typ == ofverbs.QPTypeRC {
		states = states[:1] // an RC QP reaches RTS by connecting; INIT suffices to error it
	}
	if err := f.qp.ModifyState(states...); err != nil {
		t.Fatal(err)
	}
	return f
}

// pollN waits (bounded) for n completions of cq.
func pollN(t *testing.T, cq *ofverbs.CQ, n int, what string) []ofverbs.WC {
	t.Helper()
	var got []ofverbs.WC
	wcs := make([]ofverbs.WC, 16)
	deadline := time.Now().Add(scaled(10 * time.Second))
	for len(got) < n {
		k, err := cq.Poll(wcs)
		if err != nil {
			t.Fatalf("%s: poll: %v", what, err)
		}
		got = append(got, wcs[:k]...)
		if k == 0 {
			if time.Now().After(deadline) {
				t.Fatalf("%s: %d of %d completions within %v: %+v", what, len(got), n, scaled(10*time.Second), got)
			}
			time.Sleep(100 * time.Microsecond)
		}
	}
	return got
}

// checkFlushed checks that wcs are the flushes of want, in order.
func checkFlushed(t *testing.T, what string, wcs []ofverbs.WC, want []flushCase) {
	t.Helper()
	if len(wcs) != len(want) {
		t.Fatalf("%s: %d completions, want %d: %+v", what, len(wcs), len(want), wcs)
	}
	for i, wc := range wcs {
		w := want[i]
		if wc.ID != w.wr.ID || wc.Status != ofverbs.WCWRFlushErr || wc.Opcode != w.want {
			t.Errorf("%s: completion %d: wr_id %d status %v opcode %v, want the flush of %s: wr_id %d status %v opcode %v",
				what, i, wc.ID, wc.Status, wc.Opcode, w.name, w.wr.ID, ofverbs.WCWRFlushErr, w.want)
		}
	}
}

// TestFlushEveryOpcode moves a QP of each transport to ERROR, then posts a
// work request of every opcode the transport takes and receives (its own
// RQ), and checks every flushed completion: status WCWRFlushErr, wr_id,
// opcode, order. A UD and an RD QP on an SRQ also error: the SRQ's receives
// are not flushed, and a sibling QP on the same SRQ then receives into the
// first of them.
func TestFlushEveryOpcode(t *testing.T) {
	for _, typ := range []ofverbs.QPType{ofverbs.QPTypeUD, ofverbs.QPTypeRD, ofverbs.QPTypeRC} {
		t.Run(typ.String(), func(t *testing.T) {
			d := startDaemon(t, "flush-"+typ.String(), daemontest.Options{Extra: []string{"-rd-ports", rdFlushPorts.Next()}})
			ctx := d.Open(t, t.Name())
			pd, err := ctx.AllocPD()
			if err != nil {
				t.Fatal(err)
			}
			f := newFlushEnd(t, ctx, pd, typ, nil)
			var ah *ofverbs.AH
			if typ != ofverbs.QPTypeRC {
				if ah, err = pd.CreateAHTo(f.qp.Endpoint()); err != nil {
					t.Fatal(err)
				}
			}
			if err := f.qp.ModifyState(ofverbs.QPStateError); err != nil {
				t.Fatalf("modify to ERROR: %v", err)
			}
			// Receives first, then the sends: each queue flushes in its own
			// order, on its own CQ.
			var recvs []flushCase
			for i := range 3 {
				id := uint64(2000 + i)
				if n, err := f.qp.PostRecv([]ofverbs.RecvWR{{ID: id, SGL: []ofverbs.SGE{f.mr.SGE(f.mem[256:512])}}}); n != 1 {
					t.Fatalf("post receive %d: %v", id, err)
				}
				recvs = append(recvs, flushCase{fmt.Sprintf("receive %d", i), ofverbs.SendWR{ID: id}, ofverbs.WCRecv})
			}
			sends := flushSends(typ, f, ah)
			for _, c := range sends {
				if n, err := f.qp.PostSend([]ofverbs.SendWR{c.wr}); n != 1 {
					t.Fatalf("post %s: %v", c.name, err)
				}
			}
			checkFlushed(t, "send queue", pollN(t, f.scq, len(sends), "send queue"), sends)
			checkFlushed(t, "receive queue", pollN(t, f.rcq, len(recvs), "receive queue"), recvs)
			if typ == ofverbs.QPTypeRC {
				return
			}
			t.Run("SRQ", func(t *testing.T) { flushSRQ(t, ctx, pd, typ) })
		})
	}
}

// flushSRQ errors a QP of typ on an SRQ holding two receives: none of them
// completes flushed; a sibling QP on the SRQ receives a Send into the first.
func flushSRQ(t *testing.T, ctx *ofverbs.Context, pd *ofverbs.PD, typ ofverbs.QPType) {
	srq, err := pd.CreateSRQ(ofverbs.SRQInitAttr{MaxWR: 8, MaxSGE: 1})
	if err != nil {
		t.Fatal(err)
	}
	bad := newFlushEnd(t, ctx, pd, typ, srq)
	good := newFlushEnd(t, ctx, pd, typ, srq)
	for _, id := range []uint64{3000, 3001} {
		if n, err := srq.PostRecv([]ofverbs.RecvWR{{ID: id, SGL: []ofverbs.SGE{good.mr.SGE(good.mem[256:512])}}}); n != 1 {
			t.Fatalf("post SRQ receive %d: %v", id, err)
		}
	}
	if err := bad.qp.ModifyState(ofverbs.QPStateError); err != nil {
		t.Fatalf("modify to ERROR: %v", err)
	}
	// A send on the erroring QP completes flushed: its service ran (and
	// would have flushed the SRQ's receives then).
	sends := flushSends(typ, bad, nil)[:1]
	if n, err := bad.qp.PostSend([]ofverbs.SendWR{sends[0].wr}); n != 1 {
		t.Fatalf("post: %v", err)
	}
	checkFlushed(t, "erroring QP's send queue", pollN(t, bad.scq, 1, "send queue"), sends)

	snd := newFlushEnd(t, ctx, pd, typ, nil)
	ah, err := pd.CreateAHTo(good.qp.Endpoint())
	if err != nil {
		t.Fatal(err)
	}
	copy(snd.mem, "after the flush")
	if n, err := snd.qp.PostSend([]ofverbs.SendWR{{ID: 1, Opcode: ofverbs.WRSend, Signaled: true, AH: ah,
		SGL: []ofverbs.SGE{snd.mr.SGE(snd.mem[:15])}}}); n != 1 {
		t.Fatalf("post: %v", err)
	}
	if wc := pollN(t, snd.scq, 1, "sender")[0]; wc.Status != ofverbs.WCSuccess {
		t.Fatalf("send: %v", wc.Err())
	}
	wc := pollN(t, good.rcq, 1, "sibling QP")[0]
	if wc.Status != ofverbs.WCSuccess || wc.ID != 3000 || string(good.mem[256:256+wc.ByteLen]) != "after the flush" {
		t.Fatalf("sibling QP's receive: wr_id %d status %v %q, want wr_id 3000 success %q", wc.ID, wc.Status, good.mem[256:256+wc.ByteLen], "after the flush")
	}
	if k, err := bad.rcq.Poll(make([]ofverbs.WC, 4)); k != 0 || err != nil {
		t.Fatalf("erroring QP's receive CQ: %d completions (%v), want none: its receives are the SRQ's", k, err)
	}
}
