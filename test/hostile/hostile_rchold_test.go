package hostile

import (
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/iwarpd/iwarpd/ddp"
	"github.com/iwarpd/iwarpd/mpa"
	"github.com/iwarpd/iwarpd/ofverbs"
	"github.com/iwarpd/iwarpd/rdmap"
	"github.com/iwarpd/iwarpd/test/daemontest"
)

// A hostile RC peer against the receive hold (docs/iwarpd.md "RC receive
// hold"): it floods Sends at QPs created with HoldRecv that never post a
// receive. The receiving daemon holds at most -rc-hold-msgs messages and
// -rc-hold-bytes octets per QP and -user-max-held-bytes for the user, and
// terminates each QP past a bound; its memory stays bounded whatever the
// peer sends; a well-behaved client of the same daemon is served
// throughout.

// rcHoldListenPort is the victim's TCP listener (doc.go).
const rcHoldListenPort = 26880

// Bounds the daemon runs with: small, so that the flood passes them fast.
const (
	holdMsgs     = 64
	holdBytes    = 1 << 20
	holdUserMax  = 3 << 20
	holdConns    = 6
	floodPerConn = 64 << 20 // octets each attacker tries to send
)

// rawInitiator connects to addr as an MPA initiator (client-server mode,
// Rev 2, CRC as the responder likes) and returns the connection and an
// FPDU sender.
func rawInitiator(addr string) (*net.TCPConn, *mpa.Sender, error) {
	c, err := net.DialTimeout("tcp", addr, daemontest.Scaled(10*time.Second))
	if err != nil {
		return nil, nil, err
	}
	conn := c.(*net.TCPConn)
	ini := mpa.NewInitiator(mpa.Policy{Revision: 2, CRC: mpa.CRCPreferred, IRD: 4, ORD: 4})
	req := ini.Request()
	conn.SetDeadline(time.Now().Add(daemontest.Scaled(15 * time.Second)))
	if _, err := conn.Write(req.Append(nil)); err != nil {
		conn.Close()
		return nil, nil, err
	}
	var in []byte
	buf := make([]byte, 4096)
	for range 1000 {
		n, err := conn.Read(buf)
		in = append(in, buf[:n]...)
		if f, _, perr := mpa.ParseFrame(in); perr == nil {
			p, err := ini.HandleReply(f)
			if err != nil {
				conn.Close()
				return nil, nil, err
			}
			conn.SetDeadline(time.Time{})
			return conn, mpa.NewSender(p.CRC, p.MarkersTx), nil
		}
		if err != nil {
			conn.Close()
			return nil, nil, fmt.Errorf("reading the MPA Reply: %w", err)
		}
	}
	conn.Close()
	return nil, nil, errors.New("no MPA Reply")
}

// flood sends Sends until the daemon ends the connection or floodPerConn
// octets went out: many small messages, or (grow) one message that never
// ends (no Last flag), so that the hold's message bound and its octet
// bound are both attacked. It returns the octets written.
func flood(conn *net.TCPConn, snd *mpa.Sender, grow bool) int {
	payload := make([]byte, 16<<10)
	sent, msn, mo := 0, uint32(1), uint32(0)
	for sent < floodPerConn {
		h := ddp.Header{Version: ddp.Version, ULPControl: uint8(rdmap.MakeControl(rdmap.OpSend)), QN: rdmap.QNSend, MSN: msn, MO: mo, Last: !grow}
		p := payload[:100]
		if grow {
			p = payload
			mo += uint32(len(p))
		} else {
			msn++
		}
		fpdu := snd.AppendFPDU(nil, append(h.Append(nil), p...))
		conn.SetWriteDeadline(time.Now().Add(daemontest.Scaled(10 * time.Second)))
		n, err := conn.Write(fpdu)
		sent += n
		if err != nil {
			return sent
		}
	}
	return sent
}

// heldNow sums what the daemon's QPs hold now (iwarpctl -json qps) and
// returns the largest per QP.
func heldNow(t *testing.T, sock string) (total, most int64) {
	t.Helper()
	out, rc := ctl(t, sock, "-json", "qps")
	if rc != 0 {
		t.Fatalf("iwarpctl qps: %s", out)
	}
	var qps []struct {
		Counters map[string]int64 `json:"counters"`
	}
	if err := json.Unmarshal([]byte(out), &qps); err != nil {
		t.Fatalf("iwarpctl qps: %v: %s", err, out)
	}
	for _, q := range qps {
		b := q.Counters["rc_held_bytes"]
		total += b
		most = max(most, b)
	}
	return total, most
}

// TestHostileRCHoldFlood: holdConns raw peers each flood an accepted RC
// QP (HoldRecv, no receive ever posted), half with small Sends, half with
// one endless Send. Each QP is terminated, no QP ever holds more than
// -rc-hold-bytes, all together never more than -user-max-held-bytes, the
// daemon's resident memory grows by far less than what was sent, the
// held octets are all dropped when the QPs end, and the bystander is
// served throughout.
func TestHostileRCHoldFlood(t *testing.T) {
	d := daemontest.Start(t, "rchold", daemontest.Options{Ports: nextPorts(), Extra: []string{
		"-rc-hold-msgs", fmt.Sprint(holdMsgs), "-rc-hold-bytes", fmt.Sprint(holdBytes),
		"-user-max-held-bytes", fmt.Sprint(holdUserMax)}})
	by := startBystander(t, d)
	ctx := d.Open(t, "victim")
	pd, err := ctx.AllocPD()
	if err != nil {
		t.Fatal(err)
	}
	cq, err := ctx.CreateCQ(1024, nil)
	if err != nil {
		t.Fatal(err)
	}
	l, err := ctx.Listen(fmt.Sprintf("127.0.0.1:%d", rcHoldListenPort))
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	var qps []*ofverbs.QP
	accepted := make(chan error, 1)
	go func() {
		for range holdConns {
			req, err := l.GetRequest(daemontest.Scaled(15 * time.Second))
			if err != nil {
				accepted <- err
				return
			}
			qp, err := pd.CreateQP(ofverbs.QPInitAttr{Type: ofverbs.QPTypeRC, SendCQ: cq, RecvCQ: cq, HoldRecv: true,
				Cap: ofverbs.QPCap{MaxSendWR: 16, MaxRecvWR: 16, MaxSendSGE: 1, MaxRecvSGE: 1}})
			if err == nil {
				err = qp.ModifyState(ofverbs.QPStateInit)
			}
			if err == nil {
				err = req.Accept(qp, ofverbs.ConnParam{})
			}
			if err != nil {
				accepted <- err
				return
			}
			qps = append(qps, qp)
		}
		accepted <- nil
	}()
	conns := make([]*net.TCPConn, holdConns)
	snds := make([]*mpa.Sender, holdConns)
	for i := range conns {
		if conns[i], snds[i], err = rawInitiator(fmt.Sprintf("127.0.0.1:%d", rcHoldListenPort)); err != nil {
			t.Fatalf("raw peer %d: %v", i, err)
		}
		defer conns[i].Close()
	}
	select {
	case err := <-accepted:
		if err != nil {
			t.Fatalf("accept: %v", err)
		}
	case <-time.After(daemontest.Scaled(30 * time.Second)):
		t.Fatal("accept did not return")
	}
	by.progressed(t, "before the flood")
	pid := d.Cmd.Process.Pid
	rss0 := procVmRSS(pid)

	var wg sync.WaitGroup
	sent := make([]int, holdConns)
	for i := range conns {
		wg.Add(1)
		go func() {
			defer wg.Done()
			sent[i] = flood(conns[i], snds[i], i%2 == 1)
		}()
	}
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	var maxTotal, maxQP, maxRSS int64
	sample := func() {
		total, most := heldNow(t, d.Sock)
		maxTotal, maxQP = max(maxTotal, total), max(maxQP, most)
		maxRSS = max(maxRSS, procVmRSS(pid))
	}
	deadline := time.Now().Add(daemontest.Scaled(60 * time.Second))
	for flooding := true; flooding; {
		select {
		case <-done:
			flooding = false
		case <-time.After(20 * time.Millisecond):
			if time.Now().After(deadline) {
				t.Fatalf("the raw peers still write after %v: the daemon reads their floods without ending the QPs", daemontest.Scaled(60*time.Second))
			}
		}
		sample()
	}
	total := 0
	for _, n := range sent {
		total += n
	}
	t.Logf("raw peers wrote %d octets; held at most %d per QP, %d in all; daemon VmRSS %d octets before, at most %d during",
		total, maxQP, maxTotal, rss0, maxRSS)
	if maxQP > holdBytes || maxTotal > holdUserMax {
		t.Fatalf("held %d octets on one QP (bound %d), %d in all (bound %d)", maxQP, holdBytes, maxTotal, holdUserMax)
	}
	// Resident memory: the bounds, the Go heap's slack and the socket
	// buffers the kernel keeps, far below what the peers wrote.
	if grew := maxRSS - rss0; rss0 <= 0 || grew > 64<<20 {
		t.Fatalf("the daemon's resident memory grew by %d octets while peers wrote %d", grew, total)
	}
	// Every victim QP was terminated, and what it held was dropped.
	daemontest.Eventually(t, "every flooded QP in ERROR", daemontest.Scaled(20*time.Second), func() bool {
		for _, qp := range qps {
			if a, err := qp.Query(); err != nil || a.State != ofverbs.QPStateError {
				return false
			}
		}
		return true
	})
	if total, _ := heldNow(t, d.Sock); total != 0 {
		t.Fatalf("the daemon still holds %d octets after every flooded QP ended", total)
	}
	var c map[string]int64
	out, _ := ctl(t, d.Sock, "-json", "counters")
	if err := json.Unmarshal([]byte(out), &c); err != nil {
		t.Fatalf("iwarpctl counters: %v: %s", err, out)
	}
	if c["rc_recv_held"] == 0 || c["rc_held_dropped"] != c["rc_recv_held"] {
		t.Fatalf("rc_recv_held %d, rc_held_dropped %d: want every held message dropped", c["rc_recv_held"], c["rc_held_dropped"])
	}
	by.progressed(t, "after the flood")
	d.CheckAlive(t)
}
