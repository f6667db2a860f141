package hostile

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"net"
	"net/netip"
	"os/exec"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/iwarpd/iwarpd/ofverbs"
	"github.com/iwarpd/iwarpd/proto"
	"github.com/iwarpd/iwarpd/test/daemontest"
)

// Helpers of the key and placement attacks (issue 13 points 4 and 9):
// ofverbs peers, counters read with iwarpctl, a raw UDP attacker, and a
// well-behaved pair checked beside every attack.

// ctlQPs returns iwarpctl -json qps of d.
func ctlQPs(t *testing.T, d *daemontest.Daemon) []proto.QPInfo {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), daemontest.Scaled(15*time.Second))
	defer cancel()
	cmd := exec.CommandContext(ctx, daemontest.Bins["iwarpctl"], "-socket", d.Sock, "-json", "qps")
	cmd.Env = daemontest.CleanEnv()
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Run(); err != nil {
		t.Fatalf("iwarpctl -json qps: %v\n%s", err, errb.String())
	}
	var qps []proto.QPInfo
	if err := json.Unmarshal(out.Bytes(), &qps); err != nil {
		t.Fatalf("iwarpctl -json qps: %v\n%s", err, out.String())
	}
	return qps
}

// qpCounters returns the counters iwarpctl shows for the QP at addr.
func qpCounters(t *testing.T, d *daemontest.Daemon, addr netip.AddrPort) map[string]int64 {
	t.Helper()
	for _, q := range ctlQPs(t, d) {
		if q.Addr == addr.String() {
			return q.Counters
		}
	}
	t.Fatalf("iwarpctl lists no QP at %v", addr)
	return nil
}

// peer is an ofverbs datagram QP with one registered region.
type peer struct {
	name string
	ctx  *ofverbs.Context
	pd   *ofverbs.PD
	mem  []byte
	mr   *ofverbs.MR
	scq  *ofverbs.CQ
	rcq  *ofverbs.CQ
	qp   *ofverbs.QP
}

func newPeer(t *testing.T, d *daemontest.Daemon, name string, typ ofverbs.QPType, size int, access ofverbs.Access) *peer {
	t.Helper()
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
	}
	p := &peer{name: name, ctx: d.Open(t, name)}
	var err error
	p.pd, err = p.ctx.AllocPD()
	must(err)
	buf, err := p.ctx.AllocBuffer(size)
	must(err)
	p.mem = buf.Bytes()
	p.mr, err = p.pd.RegMR(p.mem, access|ofverbs.AccessLocalWrite)
	must(err)
	p.scq, err = p.ctx.CreateCQ(256, nil)
	must(err)
	p.rcq, err = p.ctx.CreateCQ(256, nil)
	must(err)
	p.qp, err = p.pd.CreateQP(ofverbs.QPInitAttr{Type: typ, SendCQ: p.scq, RecvCQ: p.rcq,
		Cap: ofverbs.QPCap{MaxSendWR: 64, MaxRecvWR: 64, MaxSendSGE: 1, MaxRecvSGE: 1, MaxInline: 64}})
	must(err)
	must(p.qp.ModifyState(ofverbs.QPStateInit, ofverbs.QPStateRTR, ofverbs.QPStateRTS))
	return p
}

// recv posts a receive of b (inside p.mem).
func (p *peer) recv(t *testing.T, id uint64, b []byte) {
	t.Helper()
	if n, err := p.qp.PostRecv([]ofverbs.RecvWR{{ID: id, SGL: []ofverbs.SGE{p.mr.SGE(b)}}}); n != 1 {
		t.Fatalf("%s: post receive: %v", p.name, err)
	}
}

// poll waits (bounded) for one completion on cq.
func poll(t *testing.T, cq *ofverbs.CQ, what string) ofverbs.WC {
	t.Helper()
	wc := make([]ofverbs.WC, 1)
	deadline := time.Now().Add(daemontest.Scaled(10 * time.Second))
	for i := 0; i < 10_000_000 && time.Now().Before(deadline); i++ {
		n, err := cq.Poll(wc)
		if err != nil {
			t.Fatalf("%s: poll: %v", what, err)
		}
		if n == 1 {
			return wc[0]
		}
		time.Sleep(50 * time.Microsecond)
	}
	t.Fatalf("%s: no completion within %v", what, daemontest.Scaled(10*time.Second))
	return ofverbs.WC{}
}

// noCompletion checks that cq stays empty for a short while.
func noCompletion(t *testing.T, cq *ofverbs.CQ, what string) {
	t.Helper()
	wc := make([]ofverbs.WC, 1)
	for range 20 {
		if n, _ := cq.Poll(wc); n != 0 {
			t.Fatalf("%s: unexpected completion %+v", what, wc[0])
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// attacker is a raw UDP socket of the test process.
type attacker struct {
	conn *net.UDPConn
}

func newAttacker(t *testing.T) *attacker {
	t.Helper()
	c, err := net.ListenUDP("udp4", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return &attacker{conn: c}
}

func (a *attacker) send(t *testing.T, to netip.AddrPort, b []byte) {
	t.Helper()
	if _, err := a.conn.WriteToUDPAddrPort(b, to); err != nil {
		t.Fatal(err)
	}
}

// drain reads what reached the attacker's socket until it has been quiet
// for quiet (at most 100 000 datagrams).
func (a *attacker) drain(quiet time.Duration) [][]byte {
	var got [][]byte
	buf := make([]byte, 65536)
	for range 100_000 {
		a.conn.SetReadDeadline(time.Now().Add(quiet))
		n, _, err := a.conn.ReadFromUDPAddrPort(buf)
		if err != nil {
			break
		}
		got = append(got, bytes.Clone(buf[:n]))
	}
	return got
}

// wellBehaved is a pair of UD QPs on a daemon exchanging messages in the
// background (each a Send, answered by a Send), so that an attack's effect
// on a bystander shows.
type wellBehaved struct {
	rounds atomic.Int64
	stop   chan struct{}
	done   chan struct{}
	mu     sync.Mutex
	err    error
}

func startWellBehaved(t *testing.T, d *daemontest.Daemon) *wellBehaved {
	t.Helper()
	a := newPeer(t, d, "good-a", ofverbs.QPTypeUD, 1<<16, 0)
	b := newPeer(t, d, "good-b", ofverbs.QPTypeUD, 1<<16, 0)
	toB, err := a.pd.CreateAHTo(b.qp.Endpoint())
	if err != nil {
		t.Fatal(err)
	}
	toA, err := b.pd.CreateAHTo(a.qp.Endpoint())
	if err != nil {
		t.Fatal(err)
	}
	w := &wellBehaved{stop: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(w.done)
		wc := make([]ofverbs.WC, 4)
		msg := []byte("well-behaved client message")
		copy(a.mem, msg)
		copy(b.mem, msg)
		fail := func(err error) {
			w.mu.Lock()
			w.err = err
			w.mu.Unlock()
		}
		// wait polls cq for one completion of the wanted opcode (bounded).
		wait := func(cq *ofverbs.CQ, op ofverbs.WCOpcode) error {
			deadline := time.Now().Add(daemontest.Scaled(10 * time.Second))
			for i := 0; i < 10_000_000; i++ {
				n, err := cq.Poll(wc[:1])
				if err != nil {
					return err
				}
				if n == 1 {
					if wc[0].Status != ofverbs.WCSuccess || wc[0].Opcode != op {
						return wc[0].Err()
					}
					return nil
				}
				if time.Now().After(deadline) {
					return errors.New("a well-behaved message took longer than the deadline")
				}
				time.Sleep(50 * time.Microsecond)
			}
			return errors.New("poll budget spent")
		}
		for i := 0; ; i++ {
			select {
			case <-w.stop:
				return
			default:
			}
			for _, p := range []*peer{a, b} {
				if n, err := p.qp.PostRecv([]ofverbs.RecvWR{{ID: uint64(i), SGL: []ofverbs.SGE{p.mr.SGE(p.mem[4096:8192])}}}); n != 1 {
					fail(err)
					return
				}
			}
			send := func(p *peer, ah *ofverbs.AH) error {
				_, err := p.qp.PostSend([]ofverbs.SendWR{{ID: uint64(i), Opcode: ofverbs.WRSend, Signaled: true, AH: ah,
					SGL: []ofverbs.SGE{p.mr.SGE(p.mem[:len(msg)])}}})
				return err
			}
			for _, step := range []func() error{
				func() error { return send(a, toB) },
				func() error { return wait(a.scq, ofverbs.WCSend) },
				func() error { return wait(b.rcq, ofverbs.WCRecv) },
				func() error { return send(b, toA) },
				func() error { return wait(b.scq, ofverbs.WCSend) },
				func() error { return wait(a.rcq, ofverbs.WCRecv) },
			} {
				if err := step(); err != nil {
					fail(err)
					return
				}
			}
			if !bytes.Equal(a.mem[4096:4096+len(msg)], msg) || !bytes.Equal(b.mem[4096:4096+len(msg)], msg) {
				fail(errors.New("a well-behaved message arrived corrupted"))
				return
			}
			w.rounds.Add(1)
		}
	}()
	t.Cleanup(w.end)
	return w
}

func (w *wellBehaved) end() {
	select {
	case <-w.stop:
	default:
		close(w.stop)
	}
	<-w.done
}

// progressed fails t unless the pair completes more round trips (bounded
// wait) and never failed.
func (w *wellBehaved) progressed(t *testing.T, phase string) {
	t.Helper()
	from := w.rounds.Load()
	daemontest.Eventually(t, "the well-behaved pair to keep exchanging ("+phase+")", 15*time.Second, func() bool {
		select {
		case <-w.done:
			w.mu.Lock()
			defer w.mu.Unlock()
			t.Fatalf("the well-behaved pair failed during %s: %v", phase, w.err)
		default:
		}
		return w.rounds.Load() >= from+20
	})
}
