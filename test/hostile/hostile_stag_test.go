package hostile

import (
	"bytes"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/iwarpd/iwarpd/ddp"
	"github.com/iwarpd/iwarpd/iwerr"
	"github.com/iwarpd/iwarpd/llp/dgram"
	"github.com/iwarpd/iwarpd/ofverbs"
	"github.com/iwarpd/iwarpd/rdmap"
	"github.com/iwarpd/iwarpd/test/daemontest"
)

// Issue 13 point 4: remote memory access by guessing. Before the fix an
// STag was handle<<8 | 8 random bits with small sequential handles, the
// rkey was the lkey, and a stranger read a secret after 368 guesses and
// overwrote it by Write-Record after 769, with no event at the victim and
// error codes that told an invalid STag from bounds.

// oldSchemeGuesses is how many STags the attacker tries: every STag the old
// scheme could give a session's first 8 memory regions (8 × 256).
const oldSchemeGuesses = 8 * 256

// oldSchemeSTag is guess i of the old scheme: handle i/256+1, key i%256.
func oldSchemeSTag(i int) uint32 { return uint32(i/256+1)<<8 | uint32(i%256) }

// writeRecordDatagram is a one-segment UD Write-Record of payload to
// (stag, to), record id, with keys.
func writeRecordDatagram(keys dgram.Keys, stag uint32, to uint64, id uint32, payload []byte) []byte {
	h := ddp.Header{Tagged: true, Last: true, Version: ddp.Version, ULPControl: uint8(rdmap.MakeControl(rdmap.OpWriteRecord)),
		Stag: stag, TO: to}
	w := rdmap.WriteRecord{RecordID: id, MessageLength: uint32(len(payload))}
	return dgram.AppendUD(nil, keys, true, h.Append(nil), w.Append(nil), payload)
}

// errorReply decodes an error message the attacker got: its key header and
// the error it names.
func errorReply(t *testing.T, b []byte) (dgram.Keys, iwerr.Error) {
	t.Helper()
	d, err := dgram.ParseUD(b, true)
	if err != nil {
		t.Fatalf("reply %x: %v", b, err)
	}
	h, hl, err := ddp.Parse(d.Segment)
	if err != nil || h.Tagged || h.QN != rdmap.QNTerminate || rdmap.Control(h.ULPControl).Opcode() != rdmap.OpTerminate {
		t.Fatalf("reply is not an error message: %+v %v", h, err)
	}
	term, _, err := rdmap.ParseTerminate(d.Segment[hl:])
	if err != nil {
		t.Fatalf("reply's Terminate header: %v", err)
	}
	return d.Keys, term.Err
}

// refusalEvent waits (bounded) for an EventRemoteAccessRefused on p's QP
// whose detail names from.
func refusalEvent(t *testing.T, p *peer, from string) ofverbs.AsyncEvent {
	t.Helper()
	deadline := time.After(daemontest.Scaled(10 * time.Second))
	for range 10_000 {
		select {
		case ev := <-p.ctx.AsyncEvents():
			if ev.Type == ofverbs.EventRemoteAccessRefused && ev.QP == p.qp && strings.Contains(ev.Detail, from) {
				return ev
			}
		case <-deadline:
			t.Fatalf("%s: no remote-access-refused event naming %s", p.name, from)
		}
	}
	t.Fatalf("%s: too many other events", p.name)
	return ofverbs.AsyncEvent{}
}

// TestGuessSTagWriteRecordUD: a stranger holding the victim's Q_Key (a peer
// it talks to) but no STag sends Write-Records to every STag the old scheme
// could have given the victim's first 8 regions. Nothing is placed, every
// try is counted and reported to the owner, the answers are one generic
// error at a bounded rate, and the victim's lkey does not open the door
// either. The real rkey does (the attack path is live), and a well-behaved
// pair beside it never notices.
func TestGuessSTagWriteRecordUD(t *testing.T) {
	d := daemontest.Start(t, "stag-ud", daemontest.Options{Ports: nextPorts()})
	good := startWellBehaved(t, d)
	victim := newPeer(t, d, "victim", ofverbs.QPTypeUD, 1<<16, ofverbs.AccessRemoteWrite|ofverbs.AccessRemoteRead)
	for range 7 { // more regions: more targets for a guesser
		if _, err := victim.pd.RegMR(victim.mem[8192:16384], ofverbs.AccessLocalWrite|ofverbs.AccessRemoteWrite|ofverbs.AccessRemoteRead); err != nil {
			t.Fatal(err)
		}
	}
	secret := []byte("the victim's secret: never overwritten")
	copy(victim.mem, secret)
	// A UD QP reads its socket only while it has a receive posted (the
	// receive backlog, docs/iwarpd.md): a Write-Record may consume one, so
	// without it the guesses would wait in the socket buffer unjudged. A
	// refused Write-Record consumes none: one receive serves every guess.
	victim.recv(t, 1, victim.mem[16384:16384+64])
	a := newAttacker(t)
	from := a.conn.LocalAddr().String()
	keys := dgram.Keys{QKey: victim.qp.QKey(), SrcQKey: 0x0bad0bad}
	to := victim.mr.Addr()
	before := qpCounters(t, d, victim.qp.Addr())

	for i := range oldSchemeGuesses {
		a.send(t, victim.qp.Addr(), writeRecordDatagram(keys, oldSchemeSTag(i), to, uint32(i), []byte("OVERWRIT")))
		if i%32 == 31 {
			time.Sleep(time.Millisecond) // paced: the victim's socket buffer never overflows
		}
	}
	// The victim's lkey is no rkey.
	a.send(t, victim.qp.Addr(), writeRecordDatagram(keys, victim.mr.LKey(), to, oldSchemeGuesses, []byte("OVERWRIT")))
	const tries = oldSchemeGuesses + 1
	var c map[string]int64
	daemontest.Eventually(t, "the victim to judge every guess", 20*time.Second, func() bool {
		c = qpCounters(t, d, victim.qp.Addr())
		judged := c["remote_access_refused"] - before["remote_access_refused"] + c["wrec_segments_placed"] - before["wrec_segments_placed"]
		return judged >= tries
	})
	if !bytes.Equal(victim.mem[:len(secret)], secret) {
		t.Fatalf("the secret was overwritten: %q", victim.mem[:len(secret)])
	}
	if n := c["remote_invalid_stag"] - before["remote_invalid_stag"]; n != tries {
		t.Errorf("remote_invalid_stag grew by %d, want %d (every guess names no STag)", n, tries)
	}
	if n := c["wrec_segments_placed"] - before["wrec_segments_placed"]; n != 0 {
		t.Errorf("%d guessed segments placed", n)
	}
	noCompletion(t, victim.rcq, "victim after the guesses")
	ev := refusalEvent(t, victim, from)
	t.Logf("owner told: %s", ev.Detail)

	// Answers: one generic error each, to the attacker's key, rate-limited.
	replies := a.drain(daemontest.Scaled(200 * time.Millisecond))
	c = qpCounters(t, d, victim.qp.Addr())
	sent := c["error_msgs_out"] - before["error_msgs_out"]
	limited := c["error_msgs_limited"] - before["error_msgs_limited"]
	if sent+limited != tries || limited == 0 || int64(len(replies)) > sent {
		t.Errorf("error messages: %d sent, %d held back by the rate limit, %d received; want sent+limited = %d, some limited",
			sent, limited, len(replies), tries)
	}
	if limited < tries/2 {
		t.Errorf("only %d of %d answers held back: the per-source limit does not bite", limited, tries)
	}
	for _, r := range replies {
		k, e := errorReply(t, r)
		if k.QKey != keys.SrcQKey || k.SrcQKey != victim.qp.QKey() || e != iwerr.RDMAPProtectionUnspecified {
			t.Fatalf("reply keys %+v error %v, want Q_Key %#x and the generic %v", k, e, keys.SrcQKey, iwerr.RDMAPProtectionUnspecified)
		}
	}

	// A bounds violation with the real rkey gets the same answer as a bad
	// STag (on a fresh source: the first source's bucket is empty).
	b := newAttacker(t)
	b.send(t, victim.qp.Addr(), writeRecordDatagram(keys, victim.mr.RKey(), to+1<<20, 1, []byte("OVERWRIT")))
	b.send(t, victim.qp.Addr(), writeRecordDatagram(keys, oldSchemeSTag(3), to, 2, []byte("OVERWRIT")))
	got := b.drain(daemontest.Scaled(500 * time.Millisecond))
	if len(got) != 2 {
		t.Fatalf("%d answers to a bounds violation and a bad STag, want 2", len(got))
	}
	_, e1 := errorReply(t, got[0])
	_, e2 := errorReply(t, got[1])
	if e1 != e2 {
		t.Errorf("bounds answered %v, bad STag %v: a guesser can tell them apart", e1, e2)
	}

	// The path is live: the real rkey places (and completes a record in
	// the receive posted before the guesses, which none of them took).
	b.send(t, victim.qp.Addr(), writeRecordDatagram(keys, victim.mr.RKey(), to+4096, 3, []byte("RKEYOKAY")))
	if wc := poll(t, victim.rcq, "record with the real rkey"); wc.Status != ofverbs.WCSuccess || wc.Opcode != ofverbs.WCRecvWriteRecord {
		t.Fatalf("record with the real rkey: %+v", wc)
	}
	if string(victim.mem[4096:4104]) != "RKEYOKAY" || !bytes.Equal(victim.mem[:len(secret)], secret) {
		t.Fatalf("after the real rkey: %q / %q", victim.mem[4096:4104], victim.mem[:len(secret)])
	}
	good.progressed(t, "STag guessing by Write-Record")
	d.CheckAlive(t)
}

// TestGuessSTagReadRD: a hostile client on another daemon (another node,
// another user) with an RD QP, holding the victim RD QP's endpoint, posts
// RDMA Reads of guessed STags. None returns the secret, every one fails
// with a remote access error, and the victim's owner is told. A Read with
// the real rkey returns it (the path is live).
func TestGuessSTagReadRD(t *testing.T) {
	rdPorts := func() []string { return []string{"-rd-ports", nextPorts()} }
	dv := daemontest.Start(t, "stag-rd-victim", daemontest.Options{Ports: nextPorts(), Extra: rdPorts()})
	da := daemontest.Start(t, "stag-rd-attacker", daemontest.Options{Ports: nextPorts(), Extra: rdPorts()})
	good := startWellBehaved(t, dv)
	victim := newPeer(t, dv, "victim", ofverbs.QPTypeRD, 1<<16, ofverbs.AccessRemoteRead)
	secret := []byte("the victim's secret: never read")
	copy(victim.mem, secret)
	evil := newPeer(t, da, "evil", ofverbs.QPTypeRD, 1<<16, 0)
	ah, err := evil.pd.CreateAHTo(victim.qp.Endpoint())
	if err != nil {
		t.Fatal(err)
	}
	read := func(id uint64, stag uint32) ofverbs.WC {
		t.Helper()
		sink := evil.mem[:len(secret)]
		if n, err := evil.qp.PostSend([]ofverbs.SendWR{{ID: id, Opcode: ofverbs.WRRDMARead, Signaled: true, AH: ah,
			RKey: stag, RemoteAddr: victim.mr.Addr(), SGL: []ofverbs.SGE{evil.mr.SGE(sink)}}}); n != 1 {
			t.Fatalf("post read: %v", err)
		}
		return poll(t, evil.scq, fmt.Sprintf("read %d", id))
	}
	before := qpCounters(t, dv, victim.qp.Addr())
	const guesses = 512 // RD Reads are round trips: 512 of the old scheme's 2048
	for i := range guesses {
		wc := read(uint64(i), oldSchemeSTag(i))
		if wc.Status == ofverbs.WCSuccess {
			t.Fatalf("guess %d (STag %#x) read: %q", i, oldSchemeSTag(i), evil.mem[:len(secret)])
		}
		if wc.Status != ofverbs.WCRemAccessErr {
			t.Fatalf("guess %d: %+v, want a remote access error", i, wc)
		}
	}
	if bytes.Contains(evil.mem, secret[:16]) {
		t.Fatal("the secret reached the attacker's memory")
	}
	c := qpCounters(t, dv, victim.qp.Addr())
	if n := c["remote_invalid_stag"] - before["remote_invalid_stag"]; n != guesses {
		t.Errorf("remote_invalid_stag grew by %d, want %d", n, guesses)
	}
	refusalEvent(t, victim, evil.qp.Addr().String())
	// The lkey is no rkey; the rkey is.
	if wc := read(guesses, victim.mr.LKey()); wc.Status != ofverbs.WCRemAccessErr {
		t.Errorf("read with the victim's lkey: %+v", wc)
	}
	if wc := read(guesses+1, victim.mr.RKey()); wc.Status != ofverbs.WCSuccess || !bytes.Equal(evil.mem[:len(secret)], secret) {
		t.Fatalf("read with the real rkey: %+v %q", wc, evil.mem[:len(secret)])
	}
	good.progressed(t, "STag guessing by RD Read")
	dv.CheckAlive(t)
	da.CheckAlive(t)
}

// TestSTagsUnguessable: 64 regions of one session get 128 distinct keys,
// no rkey equals its lkey, and the rkeys do not follow the handles (the old
// scheme gave all 64 a handle below 65 in bits 8-31).
func TestSTagsUnguessable(t *testing.T) {
	d := daemontest.Start(t, "stag-keys", daemontest.Options{Ports: nextPorts()})
	ctx := d.Open(t, "keys")
	pd, err := ctx.AllocPD()
	if err != nil {
		t.Fatal(err)
	}
	buf, err := ctx.AllocBuffer(1 << 16)
	if err != nil {
		t.Fatal(err)
	}
	seen := map[uint32]bool{}
	small := 0
	for i := range 64 {
		mr, err := pd.RegMR(buf.Bytes()[i*1024:(i+1)*1024], ofverbs.AccessRemoteWrite|ofverbs.AccessLocalWrite)
		if err != nil {
			t.Fatal(err)
		}
		if mr.RKey() == mr.LKey() {
			t.Fatalf("region %d: rkey == lkey (%#x)", i, mr.RKey())
		}
		for _, k := range []uint32{mr.LKey(), mr.RKey()} {
			if seen[k] {
				t.Fatalf("key %#x handed out twice", k)
			}
			seen[k] = true
		}
		if mr.RKey()>>8 < 1<<16 {
			small++
		}
	}
	// Random keys fall below 2^24 with probability 2^-8: a handful at most.
	if small > 8 {
		t.Errorf("%d of 64 rkeys have bits 8-31 below 2^16: they follow the handles", small)
	}
}
