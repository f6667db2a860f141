package atomics

import (
	"bytes"
	"testing"

	"github.com/iwarpd/iwarpd/ofverbs"
	"github.com/iwarpd/iwarpd/test/daemontest"
)

func mergeSendImm(a *ofverbs.QPInitAttr) { a.MergeSendImm = true }

// TestRCImmediateMerged: two daemons, both QPs created with MergeSendImm
// (docs/atomics.md "Send with Immediate, merged"). Each Send with
// Immediate (0 octets to several FPDUs, with and without Solicited Event)
// takes exactly one receive, which completes with the data, its length,
// WCFlagImm and the value; a Write with Immediate between them is still
// WCRecvRDMAWithImm and a plain Send carries no immediate.
func TestRCImmediateMerged(t *testing.T) {
	da := startDaemon(t, "merge-a", daemontest.Options{})
	db := startDaemon(t, "merge-b", daemontest.Options{})
	srv := newEP(t, da, "server", ofverbs.QPTypeRC, accessAll)
	s := newRCServer(t, srv, "127.0.0.1")
	s.mergeImm = true // the accepting QP
	cli := newEP(t, db, "client", ofverbs.QPTypeRC, ofverbs.AccessLocalWrite, mergeSendImm)
	sqp, err := s.connect(cli)
	if err != nil {
		t.Fatal(err)
	}
	const slot = 9000
	for i := range 7 {
		if n, err := sqp.PostRecv([]ofverbs.RecvWR{{ID: uint64(100 + i), SGL: []ofverbs.SGE{srv.mr.SGE(srv.mem[slot*i : slot*(i+1)])}}}); n != 1 {
			t.Fatal(err)
		}
	}
	for i := range cli.mem {
		cli.mem[i] = byte(i*7 + i>>8)
	}
	type msg struct {
		wr   ofverbs.SendWR
		want ofverbs.WC // ID, Opcode, ByteLen, Flags, Imm at the target
	}
	sendImm := func(id uint64, n int, imm uint32, se bool) msg {
		f := ofverbs.WCFlagImm
		if se {
			f |= ofverbs.WCFlagSolicited
		}
		return msg{ofverbs.SendWR{ID: id, Opcode: ofverbs.WRSendWithImm, Signaled: true, Solicited: se, Imm: imm,
			SGL: []ofverbs.SGE{cli.mr.SGE(cli.mem[:n])}}, ofverbs.WC{Opcode: ofverbs.WCRecv, ByteLen: uint32(n), Flags: f, Imm: imm}}
	}
	msgs := []msg{
		sendImm(1, 100, 0xdeadbeef, false),
		sendImm(2, 0, 1, true),
		{ofverbs.SendWR{ID: 3, Opcode: ofverbs.WRWriteWithImm, Signaled: true, Imm: 0x77, RKey: srv.mr.RKey(),
			RemoteAddr: srv.addr(7 * slot), SGL: []ofverbs.SGE{cli.mr.SGE(cli.mem[:64])}},
			ofverbs.WC{Opcode: ofverbs.WCRecvRDMAWithImm, Flags: ofverbs.WCFlagImm, Imm: 0x77}},
		sendImm(4, 8500, 0, false),
		{ofverbs.SendWR{ID: 5, Opcode: ofverbs.WRSend, Signaled: true, SGL: []ofverbs.SGE{cli.mr.SGE(cli.mem[:33])}},
			ofverbs.WC{Opcode: ofverbs.WCRecv, ByteLen: 33}},
		sendImm(6, 1, 0xffffffff, true),
		sendImm(7, 3000, 42, false),
	}
	for i, m := range msgs {
		if err := cli.post(m.wr); err != nil {
			t.Fatal(err)
		}
		if wc, err := cli.one(cli.scq); err != nil || wc.Err() != nil || wc.ID != m.wr.ID {
			t.Fatalf("message %d: sender's completion %+v (%v)", i, wc, err)
		}
		wc, err := srv.one(srv.rcq)
		w := m.want
		if err != nil || wc.Err() != nil || wc.ID != uint64(100+i) || wc.Opcode != w.Opcode || wc.ByteLen != w.ByteLen ||
			wc.Flags != w.Flags || wc.Imm != w.Imm {
			t.Fatalf("message %d: target's completion %+v (%v), want receive %d %+v", i, wc, err, 100+i, w)
		}
		if !bytes.Equal(srv.mem[slot*i:slot*i+int(w.ByteLen)], cli.mem[:w.ByteLen]) {
			t.Fatalf("message %d: data differs", i)
		}
	}
	if !bytes.Equal(srv.mem[7*slot:7*slot+64], cli.mem[:64]) {
		t.Fatal("written data differs")
	}
}
