package hostile

import (
	"bytes"
	"fmt"
	"testing"
	"time"

	"github.com/iwarpd/iwarpd/ddp"
	"github.com/iwarpd/iwarpd/internal/crc32c"
	"github.com/iwarpd/iwarpd/llp/dgram"
	"github.com/iwarpd/iwarpd/ofverbs"
	"github.com/iwarpd/iwarpd/rdmap"
	"github.com/iwarpd/iwarpd/test/daemontest"
)

// sendDatagram is a one-segment UD Send of payload with keys, MSN msn.
func sendDatagram(keys dgram.Keys, msn uint32, payload []byte) []byte {
	h := ddp.Header{Last: true, Version: ddp.Version, ULPControl: uint8(rdmap.MakeControl(rdmap.OpSend)),
		QN: rdmap.QNSend, MSN: msn}
	return dgram.AppendUD(nil, keys, true, h.Append(nil), payload)
}

// badCRC returns b with its CRC trailer wrong.
func badCRC(b []byte) []byte {
	b = bytes.Clone(b)
	b[len(b)-1] ^= 0x5a
	return b
}

// TestQKeyUD: datagrams that name a wrong Q_Key, Q_Key 0, or that predate
// the key header are dropped silently and counted (drop_qkey), complete no
// posted receive and are not answered; the right key gets through. A
// well-behaved pair on the same daemon never notices.
func TestQKeyUD(t *testing.T) {
	d := daemontest.Start(t, "qkey-ud", daemontest.Options{Ports: nextPorts()})
	good := startWellBehaved(t, d)
	victim := newPeer(t, d, "victim", ofverbs.QPTypeUD, 1<<16, 0)
	for i := range 8 {
		victim.recv(t, uint64(i), victim.mem[i*1024:(i+1)*1024])
	}
	a := newAttacker(t)
	k := victim.qp.QKey()
	legacy := func(payload []byte) []byte { // the pre-Q_Key framing: DDP segment | CRC
		h := ddp.Header{Last: true, Version: ddp.Version, ULPControl: uint8(rdmap.MakeControl(rdmap.OpSend)), QN: rdmap.QNSend, MSN: 1}
		b := append(h.Append(nil), payload...)
		return crc32c.Append(b, crc32c.Checksum(b))
	}
	forged := [][]byte{
		sendDatagram(dgram.Keys{QKey: k ^ 1, SrcQKey: 1}, 1, []byte("wrong key")),
		sendDatagram(dgram.Keys{QKey: k + 0x100, SrcQKey: k}, 2, []byte("wrong key, the victim's own as source")),
		sendDatagram(dgram.Keys{QKey: 0, SrcQKey: 1}, 3, []byte("no key")),
		legacy([]byte("a datagram from before Q_Keys, long enough to be judged")),
		writeRecordDatagram(dgram.Keys{QKey: k ^ 0x80000000}, victim.mr.RKey(), victim.mr.Addr(), 1, []byte("keyless write")),
	}
	before := qpCounters(t, d, victim.qp.Addr())
	const rounds = 20
	for range rounds {
		for _, b := range forged {
			a.send(t, victim.qp.Addr(), b)
		}
		time.Sleep(time.Millisecond)
	}
	want := int64(rounds * len(forged))
	var c map[string]int64
	daemontest.Eventually(t, "the victim to drop every forged datagram", 10*time.Second, func() bool {
		c = qpCounters(t, d, victim.qp.Addr())
		return c["datagrams_in"]-before["datagrams_in"] >= want
	})
	if n := c["drop_qkey"] - before["drop_qkey"]; n != want {
		t.Errorf("drop_qkey grew by %d, want %d (%v)", n, want, c)
	}
	for _, name := range []string{"drop_crc", "drop_truncated", "wrec_segments_placed", "wrec_access_errors", "messages_in", "error_msgs_out"} {
		if c[name] != before[name] {
			t.Errorf("%s moved %d -> %d: a datagram without the key got past it", name, before[name], c[name])
		}
	}
	noCompletion(t, victim.rcq, "victim after forged datagrams")
	if got := a.drain(daemontest.Scaled(100 * time.Millisecond)); len(got) != 0 {
		t.Errorf("the attacker got %d answers to datagrams without the key", len(got))
	}
	if bytes.Contains(victim.mem, []byte("keyless write")) {
		t.Error("a Write-Record without the key was placed")
	}
	// The right key gets through.
	a.send(t, victim.qp.Addr(), sendDatagram(dgram.Keys{QKey: k, SrcQKey: 7}, 9, []byte("with the key")))
	if wc := poll(t, victim.rcq, "datagram with the key"); wc.Status != ofverbs.WCSuccess || wc.ByteLen != 12 ||
		string(victim.mem[:12]) != "with the key" {
		t.Fatalf("datagram with the key: %+v %q", wc, victim.mem[:12])
	}
	good.progressed(t, "forged Q_Keys")
}

// TestQKeyRDNoReflection: junk RD datagrams without the QP's Q_Key create
// no RD peer and draw no RESET or ACK (issue 13 point 3's reflection
// vector closes for strangers), and are counted.
func TestQKeyRDNoReflection(t *testing.T) {
	d := daemontest.Start(t, "qkey-rd", daemontest.Options{Ports: nextPorts(), Extra: []string{"-rd-ports", nextPorts()}})
	good := startWellBehaved(t, d)
	victim := newPeer(t, d, "victim", ofverbs.QPTypeRD, 1<<16, 0)
	victim.recv(t, 1, victim.mem[:1024])
	a := newAttacker(t)
	seg := ddp.Header{Last: true, Version: ddp.Version, ULPControl: uint8(rdmap.MakeControl(rdmap.OpSend)), QN: rdmap.QNSend, MSN: 1}
	before := qpCounters(t, d, victim.qp.Addr())
	const n = 500
	for i := range n {
		h := dgram.RDHeader{Version: dgram.RDVersion, Type: dgram.RDData, Flags: dgram.FlagAckReq, Window: 64,
			Incarnation: uint32(i + 1), EchoedIncarnation: uint32(i * 7), Seq: 1}
		if i%2 == 1 { // an ACK with RESET-bait
			h = dgram.RDHeader{Version: dgram.RDVersion, Type: dgram.RDAck, Flags: dgram.FlagAck, Incarnation: uint32(i + 1), EchoedIncarnation: 99, CumAck: 5}
			a.send(t, victim.qp.Addr(), dgram.AppendRD(nil, dgram.Keys{QKey: victim.qp.QKey() ^ uint32(i+1)}, &h, true))
			continue
		}
		a.send(t, victim.qp.Addr(), dgram.AppendRD(nil, dgram.Keys{QKey: victim.qp.QKey() ^ uint32(i+1)}, &h, true, seg.Append(nil), []byte("junk")))
		if i%32 == 31 {
			time.Sleep(time.Millisecond)
		}
	}
	var c map[string]int64
	daemontest.Eventually(t, "the RD QP to drop every junk datagram", 10*time.Second, func() bool {
		c = qpCounters(t, d, victim.qp.Addr())
		return c["drop_qkey"]-before["drop_qkey"] >= n
	})
	if got := a.drain(daemontest.Scaled(200 * time.Millisecond)); len(got) != 0 {
		t.Errorf("junk without the key drew %d answers (RESET/ACK reflection)", len(got))
	}
	for _, name := range []string{"rd_peers_created", "rd_resets_sent", "messages_in"} {
		if c[name] != before[name] {
			t.Errorf("%s moved %d -> %d", name, before[name], c[name])
		}
	}
	noCompletion(t, victim.rcq, "RD victim after junk")
	good.progressed(t, "RD junk without the key")
}

// TestAliasedReceivesUD (issue 13 point 9): several receives posted on one
// buffer, as verbs allows. Each round a good message and, right behind it
// in the same burst, datagrams that will be dropped (bad CRC, wrong key)
// reach the QP; before the fix the receive look-ahead let the kernel write
// those into the next receive's buffer — the same memory — and destroyed
// the message just completed. The completed message must stay intact.
func TestAliasedReceivesUD(t *testing.T) {
	d := daemontest.Start(t, "alias-ud", daemontest.Options{Ports: nextPorts()})
	good := startWellBehaved(t, d)
	victim := newPeer(t, d, "victim", ofverbs.QPTypeUD, 1<<16, 0)
	shared := victim.mem[:256]
	const rounds = 16
	for i := range rounds + 4 {
		victim.recv(t, uint64(i), shared)
	}
	a := newAttacker(t)
	k := dgram.Keys{QKey: victim.qp.QKey(), SrcQKey: 5}
	junk := bytes.Repeat([]byte("JUNK"), 50)
	before := qpCounters(t, d, victim.qp.Addr())
	for r := range rounds {
		msg := []byte(fmt.Sprintf("good message %02d", r))
		a.send(t, victim.qp.Addr(), sendDatagram(k, uint32(2*r+1), msg))
		a.send(t, victim.qp.Addr(), badCRC(sendDatagram(k, uint32(2*r+2), junk)))
		a.send(t, victim.qp.Addr(), sendDatagram(dgram.Keys{QKey: k.QKey ^ 2}, uint32(2*r+2), junk))
		wc := poll(t, victim.rcq, fmt.Sprintf("round %d", r))
		if wc.Status != ofverbs.WCSuccess || wc.ID != uint64(r) || int(wc.ByteLen) != len(msg) {
			t.Fatalf("round %d: completion %+v", r, wc)
		}
		// Both junk datagrams judged (dropped) before the buffer is read.
		daemontest.Eventually(t, "the junk to be dropped", 10*time.Second, func() bool {
			c := qpCounters(t, d, victim.qp.Addr())
			return c["drop_crc"]-before["drop_crc"] >= int64(r+1) && c["drop_qkey"]-before["drop_qkey"] >= int64(r+1)
		})
		if !bytes.Equal(shared[:len(msg)], msg) {
			t.Fatalf("round %d: the completed message was overwritten: %q, want %q", r, shared[:len(msg)], msg)
		}
		if bytes.Contains(shared, []byte("JUNK")) {
			t.Fatalf("round %d: dropped datagrams reached the posted buffer", r)
		}
	}
	noCompletion(t, victim.rcq, "after the rounds")
	good.progressed(t, "junk behind aliased receives")
}
