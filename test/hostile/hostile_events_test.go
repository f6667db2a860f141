package hostile

import (
	"encoding/json"
	"net"
	"os"
	"testing"
	"time"

	"github.com/iwarpd/iwarpd/ddp"
	"github.com/iwarpd/iwarpd/iwerr"
	"github.com/iwarpd/iwarpd/llp/dgram"
	"github.com/iwarpd/iwarpd/proto"
	"github.com/iwarpd/iwarpd/rdmap"
	"github.com/iwarpd/iwarpd/test/daemontest"
	"github.com/iwarpd/iwarpd/verbsd/verbsdtest"
)

// Issue 13, point 8: a client that never reads its control socket (stopped,
// or just not reading) must not block the daemon: not its shutdown, not
// other sessions, however many events arrive for it.

func init() { helpers["mute"] = helperMute }

// helperMute opens a session with a UD QP in RTS, says the QP's address,
// and never reads its control socket again.
func helperMute() int {
	c, err := verbsdtest.Dial(os.Getenv(envSock), false)
	if err != nil {
		return helperFail("dial: %v", err)
	}
	pd, err := c.AllocPD()
	if err != nil {
		return helperFail("alloc PD: %v", err)
	}
	scq, err := c.CreateCQ(16, 0)
	if err != nil {
		return helperFail("create CQ: %v", err)
	}
	rcq, err := c.CreateCQ(16, 0)
	if err != nil {
		return helperFail("create CQ: %v", err)
	}
	q, err := c.CreateQP(pd, scq, rcq, proto.QPCaps{MaxSendWR: 4, MaxRecvWR: 4, MaxSendSGE: 1, MaxRecvSGE: 1}, verbsdtest.QPOptions{})
	if err != nil {
		return helperFail("create QP: %v", err)
	}
	if err := q.ToRTS(); err != nil {
		return helperFail("QP to RTS: %v", err)
	}
	helperReady(q.Addr)
	time.Sleep(helperLifetime())
	return 0
}

// forgedErrorMessage is a datagram-iWARP error message (untagged, QN 2,
// Terminate) anyone holding a UD QP's Q_Key (here verbsdtest's test key)
// can send to it: each raises an asynchronous event on the QP's session.
func forgedErrorMessage(msn uint32) []byte {
	h := ddp.Header{Version: ddp.Version, Last: true, ULPControl: uint8(rdmap.MakeControl(rdmap.OpTerminate)),
		QN: rdmap.QNTerminate, MSN: msn}
	t := rdmap.TerminateFor(iwerr.RDMAPInvalidStag, nil, nil)
	return dgram.AppendUD(nil, dgram.Keys{QKey: verbsdtest.TestQKey, SrcQKey: 1}, true, h.Append(nil), t.Append(nil))
}

// TestMuteClientEvents: forged error messages queue thousands of events for
// a client that does not read; the well-behaved client keeps going, the
// events are dropped and counted, iwarpctl answers, and SIGTERM stops the
// daemon at once.
func TestMuteClientEvents(t *testing.T) {
	d := daemontest.Start(t, "mute", daemontest.Options{Ports: nextPorts()})
	by := startBystander(t, d)
	by.progressed(t, "warm-up")
	p := spawnHostile(t, "mute", d.Sock, "")
	ua, err := net.ResolveUDPAddr("udp", p.info)
	if err != nil {
		t.Fatalf("the mute client's QP address %q: %v", p.info, err)
	}
	u, err := net.DialUDP("udp", nil, ua)
	if err != nil {
		t.Fatal(err)
	}
	defer u.Close()
	// Enough events to fill the event queue and the socket buffer many
	// times over (a SOCK_SEQPACKET buffer holds a few hundred).
	for i := range 5000 {
		u.Write(forgedErrorMessage(uint32(i + 1)))
		if i%100 == 99 {
			time.Sleep(time.Millisecond) // let the receive path keep up
		}
	}
	by.progressed(t, "events for a mute client")
	out, code := ctl(t, d.Sock, "-json", "sessions")
	if code != 0 {
		t.Fatalf("iwarpctl: exit %d: %s", code, out)
	}
	var sessions []proto.SessionInfo
	if err := json.Unmarshal([]byte(out), &sessions); err != nil {
		t.Fatalf("iwarpctl -json sessions: %v\n%s", err, out)
	}
	var dropped int64
	for _, s := range sessions {
		dropped += s.EventsDropped
	}
	if dropped == 0 {
		t.Errorf("no session counts dropped events after 5000 events for a mute client: %s", out)
	}
	by.end()
	if !d.Stop() {
		t.Fatal("SIGTERM did not stop the daemon within the bound: shutdown waited on the mute client")
	}
}
