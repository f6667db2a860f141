package hostile

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"fmt"
	"net/netip"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/iwarpd/iwarpd/ddp"
	"github.com/iwarpd/iwarpd/llp/dgram"
	"github.com/iwarpd/iwarpd/ofverbs"
	"github.com/iwarpd/iwarpd/rdmap"
	"github.com/iwarpd/iwarpd/test/daemontest"
	"golang.org/x/sys/unix"
)

// RD ports of the hostile RD tests (hostile_rd_test.go): 27580-27589, a
// block of 5 per daemon, handed out in turn; 27590-27597 are the spoofed
// source ports TestRDSpoofedFlood listens on.
var rdBlocks = daemontest.Blocks{Base: 27580, Size: 5, Count: 2}

const rdListenBase = 27590

// nextRDPorts returns the next RD port block, "first-last".
func nextRDPorts() string { return rdBlocks.Next() }

// rdQP is a well-behaved RD QP in RTS with one registered buffer.
type rdQP struct {
	name     string
	pd       *ofverbs.PD
	mr       *ofverbs.MR
	scq, rcq *ofverbs.CQ
	qp       *ofverbs.QP
	mem      []byte
}

func newRDQP(t *testing.T, name string, ctx *ofverbs.Context, size int) *rdQP {
	t.Helper()
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
	}
	e := &rdQP{name: name}
	var err error
	e.pd, err = ctx.AllocPD()
	must(err)
	buf, err := ctx.AllocBuffer(size)
	must(err)
	e.mem = buf.Bytes()
	e.mr, err = e.pd.RegMR(e.mem, ofverbs.AccessLocalWrite)
	must(err)
	e.scq, err = ctx.CreateCQ(1024, nil)
	must(err)
	e.rcq, err = ctx.CreateCQ(1024, nil)
	must(err)
	e.qp, err = e.pd.CreateQP(ofverbs.QPInitAttr{Type: ofverbs.QPTypeRD, SendCQ: e.scq, RecvCQ: e.rcq,
		Cap: ofverbs.QPCap{MaxSendWR: 64, MaxRecvWR: 256, MaxSendSGE: 1, MaxRecvSGE: 1}})
	must(err)
	must(e.qp.ModifyState(ofverbs.QPStateInit, ofverbs.QPStateRTR, ofverbs.QPStateRTS))
	return e
}

// rdPoll collects up to max completions of cq within timeout (scaled).
func rdPoll(cq *ofverbs.CQ, max int, timeout time.Duration) ([]ofverbs.WC, error) {
	var got []ofverbs.WC
	wcs := make([]ofverbs.WC, 64)
	deadline := time.Now().Add(daemontest.Scaled(timeout))
	for len(got) < max && time.Now().Before(deadline) {
		n, err := cq.Poll(wcs[:min(len(wcs), max-len(got))])
		if err != nil {
			return got, err
		}
		got = append(got, wcs[:n]...)
		if n == 0 {
			time.Sleep(200 * time.Microsecond)
		}
	}
	return got, nil
}

// rdFlow sends msgs messages of size octets from a to b (a window of
// receives and sends at a time), each with its own pattern, and checks
// every completion and every octet. It returns an error instead of failing
// so that it can run in a goroutine.
func rdFlow(a, b *rdQP, msgs, size int) error {
	ah, err := a.pd.CreateAHTo(b.qp.Endpoint())
	if err != nil {
		return err
	}
	const window = 16
	if 2*window*size > len(a.mem) || window*size > len(b.mem) {
		return fmt.Errorf("buffers too small for the flow")
	}
	fillMsg := func(buf []byte, m int) {
		for i := range buf {
			buf[i] = byte(i*7 + m*13 + i>>8)
		}
	}
	posted, recvd, sent := 0, 0, 0
	for recvd < msgs {
		for posted < msgs && posted-recvd < window {
			slot := posted % window
			if n, err := b.qp.PostRecv([]ofverbs.RecvWR{{ID: uint64(posted), SGL: []ofverbs.SGE{b.mr.SGE(b.mem[slot*size : (slot+1)*size])}}}); n != 1 {
				return fmt.Errorf("post receive %d: %v", posted, err)
			}
			posted++
		}
		for sent < posted && sent-recvd < window {
			slot := sent % (2 * window)
			buf := a.mem[slot*size : (slot+1)*size]
			fillMsg(buf, sent)
			if n, err := a.qp.PostSend([]ofverbs.SendWR{{ID: uint64(sent), Opcode: ofverbs.WRSend, AH: ah, Signaled: true,
				SGL: []ofverbs.SGE{a.mr.SGE(buf)}}}); n != 1 {
				return fmt.Errorf("post send %d: %v", sent, err)
			}
			sent++
		}
		rc, err := rdPoll(b.rcq, 1, 30*time.Second)
		if err != nil || len(rc) != 1 {
			return fmt.Errorf("message %d: no receive completion (%v)", recvd, err)
		}
		c := rc[0]
		if c.Status != ofverbs.WCSuccess || c.ID != uint64(recvd) || int(c.ByteLen) != size || c.Src != a.qp.Addr() {
			return fmt.Errorf("message %d: receive completion %+v", recvd, c)
		}
		want := make([]byte, size)
		fillMsg(want, recvd)
		slot := recvd % window
		if !bytes.Equal(b.mem[slot*size:(slot+1)*size], want) {
			return fmt.Errorf("message %d: payload differs", recvd)
		}
		sc, err := rdPoll(a.scq, 1, 30*time.Second)
		if err != nil || len(sc) != 1 || sc[0].Status != ofverbs.WCSuccess || sc[0].ID != uint64(recvd) {
			return fmt.Errorf("message %d: send completion %+v (%v)", recvd, sc, err)
		}
		recvd++
	}
	return nil
}

// vmRSS returns the VmRSS of pid in octets.
func vmRSS(t *testing.T, pid int) int64 {
	t.Helper()
	f, err := os.Open(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if rest, ok := strings.CutPrefix(sc.Text(), "VmRSS:"); ok {
			kb, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), 10, 64)
			if err != nil {
				t.Fatalf("VmRSS %q: %v", rest, err)
			}
			return kb << 10
		}
	}
	t.Fatalf("no VmRSS in /proc/%d/status", pid)
	return 0
}

// rdData returns an RD DATA datagram (with CRC) to the QP of Q_Key qkey
// from incarnation inc, echoing echo, sequence number seq, carrying cumAck
// (a cookie, or junk) and payload octets of a Send segment that is never
// the last. The attacker knows the Q_Key (a peer of the victim's, or an
// observer: it travels in clear text).
func rdData(qkey, inc, echo, seq, cumAck uint32, payload int) []byte {
	h := dgram.RDHeader{Version: dgram.RDVersion, Type: dgram.RDData, Flags: dgram.FlagExtSACK, Incarnation: inc,
		EchoedIncarnation: echo, Seq: seq, CumAck: cumAck}
	d := ddp.Header{Version: ddp.Version, ULPControl: uint8(rdmap.MakeControl(rdmap.OpSend)), QN: 0, MSN: 1, MO: (seq - 1) * uint32(payload)}
	seg := d.Append(nil)
	seg = append(seg, make([]byte, payload)...)
	return dgram.AppendRD(nil, dgram.Keys{QKey: qkey, SrcQKey: 0x5eed}, &h, true, seg)
}

// rawUDP sends UDP datagrams with any source port on 127.0.0.1 (a raw
// socket: the test writes the UDP header), as a source-spoofing attacker
// does.
type rawUDP struct{ fd int }

func openRawUDP(t *testing.T) *rawUDP {
	t.Helper()
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_RAW, unix.IPPROTO_UDP)
	if err != nil {
		t.Skipf("raw socket: %v (needs CAP_NET_RAW)", err)
	}
	unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_SNDBUF, 4<<20)
	t.Cleanup(func() { unix.Close(fd) })
	return &rawUDP{fd: fd}
}

// send sends payload from 127.0.0.1:srcPort to dst (UDP checksum 0: none,
// RFC 768). A full socket buffer is waited out (bounded).
func (r *rawUDP) send(srcPort uint16, dst netip.AddrPort, payload []byte) error {
	b := make([]byte, 8, 8+len(payload))
	binary.BigEndian.PutUint16(b[0:], srcPort)
	binary.BigEndian.PutUint16(b[2:], dst.Port())
	binary.BigEndian.PutUint16(b[4:], uint16(8+len(payload)))
	b = append(b, payload...)
	to := &unix.SockaddrInet4{Addr: dst.Addr().As4()}
	var err error
	for range 1000 {
		if err = unix.Sendto(r.fd, b, 0, to); err != unix.ENOBUFS && err != unix.EAGAIN {
			return err
		}
		time.Sleep(100 * time.Microsecond)
	}
	return err
}
