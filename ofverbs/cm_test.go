package ofverbs_test

import (
	"bytes"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/iwarpd/iwarpd/internal/crc32c"
	"github.com/iwarpd/iwarpd/ofverbs"
	"golang.org/x/sys/unix"
)

// Connection manager tests against real daemons (one process per side
// where it matters) and raw TCP peers that check the MPA bytes.

// newRCQP creates an RC QP in INIT with its own PD and CQs.
func newRCQP(t *testing.T, c *ofverbs.Context) *ofverbs.QP {
	t.Helper()
	pd, err := c.AllocPD()
	if err != nil {
		t.Fatal(err)
	}
	scq, err := c.CreateCQ(64, nil)
	if err != nil {
		t.Fatal(err)
	}
	rcq, err := c.CreateCQ(64, nil)
	if err != nil {
		t.Fatal(err)
	}
	qp, err := pd.CreateQP(ofverbs.QPInitAttr{Type: ofverbs.QPTypeRC, SendCQ: scq, RecvCQ: rcq,
		Cap: ofverbs.QPCap{MaxSendWR: 16, MaxRecvWR: 16, MaxSendSGE: 2, MaxRecvSGE: 2}})
	if err != nil {
		t.Fatal(err)
	}
	if err := qp.ModifyState(ofverbs.QPStateInit); err != nil {
		t.Fatal(err)
	}
	return qp
}

func qpState(t *testing.T, q *ofverbs.QP) ofverbs.QPState {
	t.Helper()
	a, err := q.Query()
	if err != nil {
		t.Fatal(err)
	}
	return a.State
}

func unhexT(t *testing.T, s string) []byte {
	t.Helper()
	b, err := hex.DecodeString(strings.ReplaceAll(s, " ", ""))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// readN reads exactly n octets from c (bounded wait).
func readN(t *testing.T, c net.Conn, n int) []byte {
	t.Helper()
	c.SetReadDeadline(time.Now().Add(scaled(10 * time.Second)))
	b := make([]byte, n)
	if _, err := io.ReadFull(c, b); err != nil {
		t.Fatalf("reading %d octets: %v (got % x)", n, err, b)
	}
	return b
}

// expectEOF checks that the peer closes c without sending more.
func expectEOF(t *testing.T, c net.Conn) {
	t.Helper()
	c.SetReadDeadline(time.Now().Add(scaled(10 * time.Second)))
	b := make([]byte, 64)
	n, err := c.Read(b)
	if n != 0 || (err != io.EOF && !errors.Is(err, syscall.ECONNRESET)) {
		t.Fatalf("after the frame: %d octets % x, %v; want EOF", n, b[:n], err)
	}
}

// acceptOne answers the next request of l on q (in a goroutine); reject
// non-nil rejects with it instead.
func acceptOne(l *ofverbs.Listener, q *ofverbs.QP, p ofverbs.ConnParam, reject []byte) chan any {
	done := make(chan any, 1)
	go func() {
		r, err := l.GetRequest(scaled(15 * time.Second))
		if err != nil {
			done <- err
			return
		}
		if reject != nil {
			err = r.Reject(reject)
		} else {
			err = r.Accept(q, p)
		}
		if err != nil {
			done <- err
			return
		}
		done <- r
	}()
	return done
}

func request(t *testing.T, done chan any) *ofverbs.ConnRequest {
	t.Helper()
	select {
	case v := <-done:
		if err, ok := v.(error); ok {
			t.Fatalf("passive side: %v", err)
		}
		return v.(*ofverbs.ConnRequest)
	case <-time.After(scaled(20 * time.Second)):
		t.Fatal("passive side did not finish")
	}
	return nil
}

func TestCMListenEphemeralPort(t *testing.T) {
	d := startDaemon(t)
	c := d.open(t)
	l, err := c.Listen(":0")
	if err != nil {
		t.Fatal(err)
	}
	if l.Addr().Port() == 0 || l.Addr().Addr() != netip.MustParseAddr("127.0.0.1") {
		t.Fatalf("Addr = %v, want 127.0.0.1 with a port", l.Addr())
	}
	conn, err := net.DialTimeout("tcp", l.Addr().String(), 2*time.Second)
	if err != nil {
		t.Fatalf("nothing listens at %v: %v", l.Addr(), err)
	}
	conn.Close()
	if _, err := c.Listen(l.Addr().String()); !errors.Is(err, unix.EADDRINUSE) {
		t.Errorf("second Listen on %v: %v, want EADDRINUSE", l.Addr(), err)
	}
	if _, err := c.Listen("127.0.0.1"); !errors.Is(err, unix.EINVAL) {
		t.Errorf("Listen without port: %v, want EINVAL", err)
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := l.GetRequest(time.Millisecond); !errors.Is(err, unix.EINVAL) {
		t.Errorf("GetRequest on a closed listener: %v", err)
	}
	// A port is free again after Close, also once a session holding it
	// ends. Not the ephemeral port above: once closed, anyone's outgoing
	// connection may take it as its source port; one of cmPort's cannot.
	addr := netip.AddrPortFrom(netip.MustParseAddr("127.0.0.1"), cmPort(t))
	l1, err := c.Listen(addr.String())
	if err != nil {
		t.Fatal(err)
	}
	if err := l1.Close(); err != nil {
		t.Fatal(err)
	}
	c2 := d.open(t)
	l2, err := c2.Listen(addr.String())
	if err != nil {
		t.Fatalf("port not released by Close: %v", err)
	}
	c2.Close()
	deadline := time.Now().Add(scaled(5 * time.Second))
	for {
		l3, err := c.Listen(l2.Addr().String())
		if err == nil {
			l3.Close()
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("port not released when the session ended: %v", err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func TestCMConnectAcceptPrivateDataAndIRDORD(t *testing.T) {
	srv, cli := startDaemon(t), startDaemon(t)
	sc, cc := srv.open(t), cli.open(t)
	l, err := sc.Listen(":0")
	if err != nil {
		t.Fatal(err)
	}
	sqp, cqp := newRCQP(t, sc), newRCQP(t, cc)
	done := acceptOne(l, sqp, ofverbs.ConnParam{PrivateData: []byte("server hello"), IRD: 6, ORD: 10}, nil)
	if err := cqp.Connect(l.Addr(), ofverbs.ConnParam{PrivateData: []byte("client hello"), IRD: 8, ORD: 4}); err != nil {
		t.Fatalf("Connect: %v", err)
	}
	r := request(t, done)
	if string(r.PrivateData()) != "client hello" || r.IRD() != 8 || r.ORD() != 4 || r.MPA().Revision != 2 ||
		r.Peer().Addr() != netip.MustParseAddr("127.0.0.1") || r.Local() != l.Addr() {
		t.Errorf("request: pd %q IRD %d ORD %d MPA %+v peer %v local %v", r.PrivateData(), r.IRD(), r.ORD(), r.MPA(), r.Peer(), r.Local())
	}
	// RFC 6581: responder IRD = min(6, initiator ORD 4), ORD = min(10, initiator IRD 8).
	ci, si := cqp.ConnInfo(), sqp.ConnInfo()
	if !ci.Connected || string(ci.PrivateData) != "server hello" || ci.IRD != 8 || ci.ORD != 4 ||
		ci.MPA.PeerIRD != 4 || ci.MPA.PeerORD != 8 || ci.Peer != l.Addr() || !ci.MPA.CRC || !ci.MPA.Enhanced || ci.MPA.Revision != 2 {
		t.Errorf("initiator: %+v", ci)
	}
	if !si.Connected || string(si.PrivateData) != "client hello" || si.IRD != 4 || si.ORD != 8 ||
		si.MPA.PeerIRD != 8 || si.MPA.PeerORD != 4 || si.Local != l.Addr() || si.Peer != ci.Local || !si.MPA.CRC {
		t.Errorf("responder: %+v (initiator local %v)", si, ci.Local)
	}
	for _, q := range []*ofverbs.QP{cqp, sqp} {
		if s := qpState(t, q); s != ofverbs.QPStateRTS {
			t.Errorf("%v after connect: %v, want RTS", q, s)
		}
	}
	// A connected QP connects no more; an RC QP is not moved to RTS by hand.
	if err := cqp.Connect(l.Addr(), ofverbs.ConnParam{}); !errors.Is(err, unix.EISCONN) {
		t.Errorf("second Connect: %v, want EISCONN", err)
	}
	q := newRCQP(t, cc)
	if err := q.ModifyState(ofverbs.QPStateRTR); !errors.Is(err, unix.EINVAL) {
		t.Errorf("RC INIT→RTR by Modify: %v, want EINVAL", err)
	}
}

func TestCMReject(t *testing.T) {
	srv, cli := startDaemon(t), startDaemon(t)
	sc, cc := srv.open(t), cli.open(t)
	l, err := sc.Listen(":0")
	if err != nil {
		t.Fatal(err)
	}
	cqp := newRCQP(t, cc)
	for i, opt := range []ofverbs.MPAOptions{{}, {Revision: 1}} {
		done := acceptOne(l, nil, ofverbs.ConnParam{}, []byte(fmt.Sprintf("go away %d", i)))
		err := cqp.Connect(l.Addr(), ofverbs.ConnParam{PrivateData: []byte("let me in"), MPA: opt})
		var rej *ofverbs.RejectedError
		if !errors.Is(err, ofverbs.ErrRejected) || !errors.As(err, &rej) || string(rej.PrivateData) != fmt.Sprintf("go away %d", i) {
			t.Fatalf("Connect %+v: %v, want a rejection with private data", opt, err)
		}
		request(t, done)
		// The QP stays in INIT and can try again.
		if s := qpState(t, cqp); s != ofverbs.QPStateInit {
			t.Fatalf("after rejection: %v", s)
		}
	}
	// Answering a request twice, or one never made, fails.
	done := acceptOne(l, nil, ofverbs.ConnParam{}, []byte("no"))
	cqp.Connect(l.Addr(), ofverbs.ConnParam{})
	r := request(t, done)
	if err := r.Reject(nil); !errors.Is(err, unix.EINVAL) {
		t.Errorf("second Reject: %v, want EINVAL", err)
	}
}

// The TCP ports this package's tests listen on at a fixed number:
// 26500-26599, a block no other package uses, below the kernel's ephemeral
// range (32768-60999) that every outgoing connection draws its source port
// from. Nothing hands out ports of this block but cmPort; the start is
// spread by PID so that two runs at once rarely meet, and a port in use is
// skipped.
const (
	cmPortBase  = 26500
	cmPortCount = 100
)

var nextCMPort atomic.Int32

// cmPort returns a port of the package's block that was free on every
// address a moment ago.
func cmPort(t *testing.T) uint16 {
	t.Helper()
	start := os.Getpid() % cmPortCount
	for range cmPortCount {
		port := cmPortBase + (start+int(nextCMPort.Add(1)-1))%cmPortCount
		l, err := net.Listen("tcp", fmt.Sprintf(":%d", port))
		if err != nil {
			continue
		}
		l.Close()
		return uint16(port)
	}
	t.Fatalf("no free TCP port in %d-%d", cmPortBase, cmPortBase+cmPortCount-1)
	return 0
}

// refusingAddr returns a loopback TCP address where a connection attempt
// is certainly refused until the test ends: a socket bound to the port and
// never listening. A port that was listened on and closed again could be
// taken a moment later (by another test's listener, or as the source port
// of anyone's outgoing connection, since it is in the ephemeral range); this
// one cannot: the socket holds it without SO_REUSEADDR or SO_REUSEPORT, so
// no other bind succeeds, and the kernel never picks a bound port as a
// connection's source. Nothing listens, so a SYN to it is answered by RST.
func refusingAddr(t *testing.T) netip.AddrPort {
	t.Helper()
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { unix.Close(fd) })
	if err := unix.Bind(fd, &unix.SockaddrInet4{Addr: [4]byte{127, 0, 0, 1}}); err != nil {
		t.Fatal(err)
	}
	sa, err := unix.Getsockname(fd)
	if err != nil {
		t.Fatal(err)
	}
	return netip.AddrPortFrom(netip.AddrFrom4([4]byte{127, 0, 0, 1}), uint16(sa.(*unix.SockaddrInet4).Port))
}

func TestCMUnreachable(t *testing.T) {
	d := startDaemon(t)
	c := d.open(t)
	addr := refusingAddr(t)
	q := newRCQP(t, c)
	// The timeout only bounds the wait: a refusal on loopback is immediate
	// (no timing is asserted).
	err := q.Connect(addr, ofverbs.ConnParam{Timeout: scaled(30 * time.Second)})
	if !errors.Is(err, unix.ECONNREFUSED) || errors.Is(err, ofverbs.ErrRejected) {
		t.Fatalf("Connect to a closed port: %v, want ECONNREFUSED", err)
	}
	if s := qpState(t, q); s != ofverbs.QPStateInit {
		t.Errorf("after failure: %v", s)
	}
	// A UD QP does not connect.
	ud := newEndpoint(t, c, epOpts{depth: 4})
	if err := ud.qp.Connect(addr, ofverbs.ConnParam{}); !errors.Is(err, unix.EINVAL) {
		t.Errorf("UD Connect: %v, want EINVAL", err)
	}
}

func TestCMTimedOut(t *testing.T) {
	d := startDaemon(t)
	c := d.open(t)
	// A TCP peer that accepts and never answers the MPA Request.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	got := make(chan []byte, 1)
	go func() {
		conn, err := ln.Accept()
		if err != nil {
			got <- nil
			return
		}
		defer conn.Close()
		conn.SetReadDeadline(time.Now().Add(scaled(10 * time.Second)))
		b := make([]byte, 20)
		io.ReadFull(conn, b)
		got <- b
		io.Copy(io.Discard, conn)
	}()
	q := newRCQP(t, c)
	// The daemon must send its MPA Request within the timeout (the TCP
	// connect, then one write): 1 s leaves room for a stalled daemon on a
	// loaded machine. Only a lower bound on the wait is checked: the
	// daemon's clock starts after ours.
	timeout := scaled(time.Second).Truncate(time.Millisecond) // the protocol carries milliseconds
	start := time.Now()
	err = q.Connect(netip.MustParseAddrPort(ln.Addr().String()), ofverbs.ConnParam{Timeout: timeout})
	el := time.Since(start)
	if !errors.Is(err, unix.ETIMEDOUT) {
		t.Fatalf("Connect to a silent peer: %v, want ETIMEDOUT", err)
	}
	if el < timeout {
		t.Errorf("timed out after %v, before the %v timeout", el, timeout)
	}
	if b := <-got; len(b) < 16 || string(b[:16]) != "MPA ID Req Frame" {
		t.Errorf("the peer received % x, want an MPA Request", b)
	}
}

// TestCMInvalidRequest sends hostile Requests to a listener: each gets the
// Reject Reply (R=1, Rev 2, no private data) and the connection is closed;
// the client hears of none of them.
func TestCMInvalidRequest(t *testing.T) {
	d := startDaemon(t)
	c := d.open(t)
	l, err := c.Listen(":0")
	if err != nil {
		t.Fatal(err)
	}
	reject := unhexT(t, "4d504120494420526570204672616d65 20 02 0000")
	for _, tc := range []struct{ name, in string }{
		{"garbage", "474554202f20485454502f312e310d0a486f7374"},
		{"rev 7", "4d504120494420526571204672616d65 40 07 0000"},
		{"PD_Length 600", "4d504120494420526571204672616d65 40 02 0258"},
		{"reply key", "4d504120494420526570204672616d65 40 02 0000"},
		{"S without IRD/ORD", "4d504120494420526571204672616d65 50 02 0000"},
	} {
		conn, err := net.Dial("tcp", l.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		conn.Write(unhexT(t, tc.in))
		if got := readN(t, conn, len(reject)); !bytes.Equal(got, reject) {
			t.Errorf("%s: answer % x, want % x", tc.name, got, reject)
		}
		expectEOF(t, conn)
		conn.Close()
	}
	if r, err := l.GetRequest(200 * time.Millisecond); !errors.Is(err, unix.ETIMEDOUT) {
		t.Errorf("GetRequest after invalid Requests: %v, %v", r, err)
	}
}

// TestCMRequestTimeout: a peer that connects and sends nothing is closed
// after -mpa-timeout.
//
// The MPA timeout is 1 s (scaled): the second part's Request must reach the
// daemon within it of the connect, which fails only if this goroutine
// stalls that long between Dial and Write. Only a lower bound on the first
// close is checked, from before Dial: the daemon's clock starts when it
// accepts, after our SYN.
func TestCMRequestTimeout(t *testing.T) {
	mpaTimeout := scaled(time.Second).Truncate(time.Millisecond)
	d := startDaemon(t, "-mpa-timeout", mpaTimeout.String())
	c := d.open(t)
	l, err := c.Listen(":0")
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	conn, err := net.Dial("tcp", l.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	expectEOF(t, conn)
	if el := time.Since(start); el < mpaTimeout {
		t.Errorf("closed after %v, before the %v MPA timeout", el, mpaTimeout)
	}
	// A valid Request that nobody answers is closed too.
	conn2, err := net.Dial("tcp", l.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer conn2.Close()
	if _, err := conn2.Write(unhexT(t, "4d504120494420526571204672616d65 40 01 0000")); err != nil {
		t.Fatal(err)
	}
	expectEOF(t, conn2)
	r, err := l.GetRequest(scaled(10 * time.Second))
	if err != nil {
		t.Fatal(err)
	}
	if err := r.Accept(newRCQP(t, c), ofverbs.ConnParam{}); !errors.Is(err, unix.EINVAL) {
		t.Errorf("Accept of an expired request: %v, want EINVAL", err)
	}
}

// TestCMWireReply checks the MPA Reply a listener sends for an accepted
// Request, byte by byte, with and without peer-to-peer mode.
func TestCMWireReply(t *testing.T) {
	d := startDaemon(t)
	c := d.open(t)
	l, err := c.Listen(":0")
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct{ name, req, reply string }{
		// Rev 2, C+S, IRD 8 ORD 4, "abc" → IRD min(6,4)=4, ORD min(10,8)=8, "xyz".
		{"client/server", "4d504120494420526571204672616d65 50 02 0007 0008 0004 616263",
			"4d504120494420526570204672616d65 50 02 0007 0004 0008 78797a"},
		// P2P offering Write and Read RTR: A echoed, Write chosen.
		{"peer-to-peer", "4d504120494420526571204672616d65 50 02 0007 8008 c004 616263",
			"4d504120494420526570204672616d65 50 02 0007 8004 8008 78797a"},
		// P2P offering only Read.
		{"read RTR", "4d504120494420526571204672616d65 50 02 0004 8008 4004",
			"4d504120494420526570204672616d65 50 02 0007 8004 4008 78797a"},
		// Rev 1, no CRC asked: the device asks (preferred); no IRD/ORD block.
		{"rev 1", "4d504120494420526571204672616d65 00 01 0003 616263",
			"4d504120494420526570204672616d65 40 01 0003 78797a"},
	} {
		conn, err := net.Dial("tcp", l.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		conn.Write(unhexT(t, tc.req))
		q := newRCQP(t, c)
		r, err := l.GetRequest(scaled(10 * time.Second))
		if err != nil {
			t.Fatal(err)
		}
		if err := r.Accept(q, ofverbs.ConnParam{PrivateData: []byte("xyz"), IRD: 6, ORD: 10}); err != nil {
			t.Fatalf("%s: Accept: %v", tc.name, err)
		}
		want := unhexT(t, tc.reply)
		if got := readN(t, conn, len(want)); !bytes.Equal(got, want) {
			t.Errorf("%s: Reply\n% x\nwant\n% x", tc.name, got, want)
		}
		conn.Close()
	}
}

// TestCMWireRequestAndTerminate checks the MPA Request the daemon sends,
// then answers with a Reply whose ORD exceeds the initiator's IRD: the
// initiator must send an LLP TERMINATE (MPA, 0x06 insufficient IRD) with
// CRC and close, and Connect fails with EPROTO.
func TestCMWireRequestAndTerminate(t *testing.T) {
	d := startDaemon(t)
	c := d.open(t)
	for _, tc := range []struct {
		name, reply string
		code        byte
		opt         ofverbs.MPAOptions
		req         string
		crc         bool
	}{
		{"insufficient IRD", "4d504120494420526570204672616d65 50 02 0004 0004 0009", 0x06, ofverbs.MPAOptions{},
			"4d504120494420526571204672616d65 50 02 0006 0008 0004 6869", true},
		{"no matching RTR", "4d504120494420526570204672616d65 10 02 0004 8004 4004", 0x07,
			ofverbs.MPAOptions{PeerToPeer: ofverbs.ToggleOn, RTR: ofverbs.RTRWrite, CRC: ofverbs.MPACRCOff},
			"4d504120494420526571204672616d65 10 02 0006 8008 8004 6869", false},
		{"S missing", "4d504120494420526570204672616d65 40 02 0000", 0x04, ofverbs.MPAOptions{PeerToPeer: ofverbs.ToggleOn},
			"4d504120494420526571204672616d65 50 02 0006 8008 c004 6869", true},
	} {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		q := newRCQP(t, c)
		res := make(chan error, 1)
		go func() {
			res <- q.Connect(netip.MustParseAddrPort(ln.Addr().String()), ofverbs.ConnParam{PrivateData: []byte("hi"), IRD: 8, ORD: 4, MPA: tc.opt})
		}()
		conn, err := ln.Accept()
		ln.Close()
		if err != nil {
			t.Fatal(err)
		}
		wantReq := unhexT(t, tc.req)
		if got := readN(t, conn, len(wantReq)); !bytes.Equal(got, wantReq) {
			t.Errorf("%s: Request\n% x\nwant\n% x", tc.name, got, wantReq)
		}
		conn.Write(unhexT(t, tc.reply))
		// ULPDU_Length 22 | DDP untagged L DV=1 | RDMAP Terminate | QN 2 | MSN 1 | MO 0 |
		// Layer LLP(2)/EType MPA(0) | ECode | flags 0 | CRC (LE; 0 when off).
		term := unhexT(t, fmt.Sprintf("0016 41 47 00000000 00000002 00000001 00000000 20 %02x 0000", tc.code))
		var sum uint32
		if tc.crc {
			sum = crc32c.Checksum(term)
		}
		term = binary.LittleEndian.AppendUint32(term, sum)
		if got := readN(t, conn, len(term)); !bytes.Equal(got, term) {
			t.Errorf("%s: TERMINATE\n% x\nwant\n% x", tc.name, got, term)
		}
		expectEOF(t, conn)
		conn.Close()
		select {
		case err := <-res:
			if !errors.Is(err, unix.EPROTO) {
				t.Errorf("%s: Connect: %v, want EPROTO", tc.name, err)
			}
		case <-time.After(scaled(10 * time.Second)):
			t.Fatalf("%s: Connect did not return", tc.name)
		}
	}
}

// TestCMNegotiationMatrix connects daemon to daemon with MPA Rev 1 and 2,
// CRC on and off, and each peer-to-peer RTR type, and checks what both
// sides negotiated.
func TestCMNegotiationMatrix(t *testing.T) {
	cli := startDaemon(t)
	asks := startDaemon(t) // CRC preferred
	// Asks no CRC, accepts every RTR type, wants markers.
	quiet := startDaemon(t, "-mpa-crc", "off", "-mpa-rtr", "write,read,send", "-mpa-markers", "true")
	rev1 := startDaemon(t, "-mpa-rev", "1") // device default Rev 1
	cc, c1 := cli.open(t), rev1.open(t)
	ac, qc := asks.open(t), quiet.open(t)
	al, err := ac.Listen(":0")
	if err != nil {
		t.Fatal(err)
	}
	ql, err := qc.Listen(":0")
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name     string
		quiet    bool
		opt      ofverbs.MPAOptions
		rev      uint8
		crc, p2p bool
		rtr      ofverbs.RTRSet
		markers  bool // the initiator asks for markers
		devRev1  bool // the initiator's daemon runs -mpa-rev 1
	}{
		{name: "rev1 crc off", quiet: true, opt: ofverbs.MPAOptions{Revision: 1, CRC: ofverbs.MPACRCOff}, rev: 1},
		{name: "rev1 crc asked", quiet: true, opt: ofverbs.MPAOptions{Revision: 1}, rev: 1, crc: true},
		{name: "rev1 responder asks", opt: ofverbs.MPAOptions{Revision: 1, CRC: ofverbs.MPACRCOff}, rev: 1, crc: true},
		{name: "rev1 device default", rev: 1, crc: true, devRev1: true},
		{name: "rev2 from a rev1 device", opt: ofverbs.MPAOptions{Revision: 2}, rev: 2, crc: true, devRev1: true},
		{name: "rev2 crc off", quiet: true, opt: ofverbs.MPAOptions{CRC: ofverbs.MPACRCOff}, rev: 2},
		{name: "rev2 crc required", opt: ofverbs.MPAOptions{CRC: ofverbs.MPACRCRequired}, rev: 2, crc: true},
		{name: "markers both ways", quiet: true, opt: ofverbs.MPAOptions{Markers: ofverbs.ToggleOn}, rev: 2, crc: true, markers: true},
		{name: "markers asked of a device without", opt: ofverbs.MPAOptions{Markers: ofverbs.ToggleOn}, rev: 2, crc: true, markers: true},
		{name: "p2p write", quiet: true, opt: ofverbs.MPAOptions{PeerToPeer: ofverbs.ToggleOn, RTR: ofverbs.RTRWrite}, rev: 2, crc: true, p2p: true, rtr: ofverbs.RTRWrite},
		{name: "p2p read", quiet: true, opt: ofverbs.MPAOptions{PeerToPeer: ofverbs.ToggleOn, RTR: ofverbs.RTRRead, CRC: ofverbs.MPACRCOff}, rev: 2, p2p: true, rtr: ofverbs.RTRRead},
		{name: "p2p send", quiet: true, opt: ofverbs.MPAOptions{PeerToPeer: ofverbs.ToggleOn, RTR: ofverbs.RTRSend}, rev: 2, crc: true, p2p: true, rtr: ofverbs.RTRSend},
		{name: "p2p default set", opt: ofverbs.MPAOptions{PeerToPeer: ofverbs.ToggleOn}, rev: 2, crc: true, p2p: true, rtr: ofverbs.RTRWrite},
	} {
		l, sctx, cctx := al, ac, cc
		if tc.quiet {
			l, sctx = ql, qc
		}
		if tc.devRev1 {
			cctx = c1
		}
		sqp, cqp := newRCQP(t, sctx), newRCQP(t, cctx)
		done := acceptOne(l, sqp, ofverbs.ConnParam{PrivateData: []byte("s")}, nil)
		if err := cqp.Connect(l.Addr(), ofverbs.ConnParam{PrivateData: []byte("c"), MPA: tc.opt}); err != nil {
			t.Fatalf("%s: Connect: %v", tc.name, err)
		}
		r := request(t, done)
		ci, si := cqp.ConnInfo(), sqp.ConnInfo()
		for side, m := range map[string]ofverbs.MPAParams{"initiator": ci.MPA, "responder": si.MPA} {
			if m.Revision != tc.rev || m.CRC != tc.crc || m.PeerToPeer != tc.p2p || m.RTR != tc.rtr || m.Enhanced != (tc.rev == 2) {
				t.Errorf("%s: %s negotiated %+v", tc.name, side, m)
			}
		}
		// Markers per direction: M in the Request asks the responder to
		// send markers, M in the Reply (the quiet device) the initiator.
		if ci.MPA.MarkersRx != tc.markers || si.MPA.MarkersTx != tc.markers ||
			ci.MPA.MarkersTx != tc.quiet || si.MPA.MarkersRx != tc.quiet {
			t.Errorf("%s: markers: initiator %+v, responder %+v", tc.name, ci.MPA, si.MPA)
		}
		if string(ci.PrivateData) != "s" || string(si.PrivateData) != "c" || string(r.PrivateData()) != "c" {
			t.Errorf("%s: private data %q / %q", tc.name, ci.PrivateData, si.PrivateData)
		}
		if tc.rev == 1 && (r.IRD() != 0 || r.ORD() != 0) {
			t.Errorf("%s: Rev 1 request reports IRD/ORD %d/%d", tc.name, r.IRD(), r.ORD())
		}
		if tc.rev == 2 && (r.IRD() != 16 || ci.IRD != 16 || ci.ORD != 16 || si.IRD != 16 || si.ORD != 16) {
			t.Errorf("%s: default IRD/ORD: request %d, initiator %+v, responder %+v", tc.name, r.IRD(), ci, si)
		}
	}
}

// waitCM returns the next event of type want on q (others are skipped).
func waitCM(t *testing.T, q *ofverbs.QP, want ofverbs.CMEventType) ofverbs.CMEvent {
	t.Helper()
	timeout := time.After(scaled(15 * time.Second))
	for {
		select {
		case ev := <-q.CMEvents():
			if ev.Type == want {
				return ev
			}
		case <-timeout:
			t.Fatalf("%v: no %v event", q, want)
		}
	}
}

func TestCMDisconnect(t *testing.T) {
	srv, cli := startDaemon(t), startDaemon(t)
	sc, cc := srv.open(t), cli.open(t)
	l, err := sc.Listen(":0")
	if err != nil {
		t.Fatal(err)
	}
	for _, abort := range []bool{false, true} {
		sqp, cqp := newRCQP(t, sc), newRCQP(t, cc)
		done := acceptOne(l, sqp, ofverbs.ConnParam{}, nil)
		if err := cqp.Connect(l.Addr(), ofverbs.ConnParam{}); err != nil {
			t.Fatal(err)
		}
		request(t, done)
		waitCM(t, sqp, ofverbs.CMEstablished)
		if abort {
			err = cqp.Abort()
		} else {
			err = cqp.Disconnect()
		}
		if err != nil {
			t.Fatalf("abort %v: %v", abort, err)
		}
		ce, se := waitCM(t, cqp, ofverbs.CMDisconnected), waitCM(t, sqp, ofverbs.CMDisconnected)
		if !abort && (ce.Errno != 0 || se.Errno != 0) {
			t.Errorf("graceful: initiator %+v, responder %+v", ce, se)
		}
		if abort && se.Errno != unix.ECONNABORTED {
			t.Errorf("abort: responder %+v, want ECONNABORTED (Terminate received)", se)
		}
		for _, q := range []*ofverbs.QP{cqp, sqp} {
			if s := qpState(t, q); s != ofverbs.QPStateError {
				t.Errorf("abort %v: %v is %v after the disconnect, want ERROR", abort, q, s)
			}
		}
	}
	q := newRCQP(t, cc)
	if err := q.Disconnect(); !errors.Is(err, unix.ENOTCONN) {
		t.Errorf("Disconnect of an unconnected QP: %v, want ENOTCONN", err)
	}
}

// TestCMDisconnectRightAfterConnect: a Disconnect sent as soon as Connect
// returns ends the connection. The daemon used to take it for the
// cancellation of the Connect (still listed as in progress for a moment
// after its Established event) and drop it (CI, 2026-11-28).
func TestCMDisconnectRightAfterConnect(t *testing.T) {
	srv, cli := startDaemon(t), startDaemon(t)
	sc, cc := srv.open(t), cli.open(t)
	l, err := sc.Listen(":0")
	if err != nil {
		t.Fatal(err)
	}
	for i := range 40 {
		sqp, cqp := newRCQP(t, sc), newRCQP(t, cc)
		done := acceptOne(l, sqp, ofverbs.ConnParam{}, nil)
		if err := cqp.Connect(l.Addr(), ofverbs.ConnParam{}); err != nil {
			t.Fatalf("round %d: %v", i, err)
		}
		if err := cqp.Disconnect(); err != nil {
			t.Fatalf("round %d: Disconnect: %v", i, err)
		}
		request(t, done)
		if ev := waitCM(t, cqp, ofverbs.CMDisconnected); ev.Errno != 0 {
			t.Errorf("round %d: initiator %+v, want a graceful end", i, ev)
		}
		waitCM(t, sqp, ofverbs.CMDisconnected)
		sqp.Close()
		cqp.Close()
	}
}

// rcEP is an RC QP in INIT with a registered buffer.
type rcEP struct {
	qp       *ofverbs.QP
	mr       *ofverbs.MR
	buf      []byte
	scq, rcq *ofverbs.CQ
}

func newRCEP(t *testing.T, c *ofverbs.Context) *rcEP {
	t.Helper()
	pd, err := c.AllocPD()
	if err != nil {
		t.Fatal(err)
	}
	b, err := c.AllocBuffer(4096)
	if err != nil {
		t.Fatal(err)
	}
	e := &rcEP{buf: b.Bytes()}
	if e.mr, err = pd.RegMR(e.buf, ofverbs.AccessLocalWrite); err != nil {
		t.Fatal(err)
	}
	if e.scq, err = c.CreateCQ(16, nil); err != nil {
		t.Fatal(err)
	}
	if e.rcq, err = c.CreateCQ(16, nil); err != nil {
		t.Fatal(err)
	}
	if e.qp, err = pd.CreateQP(ofverbs.QPInitAttr{Type: ofverbs.QPTypeRC, SendCQ: e.scq, RecvCQ: e.rcq,
		Cap: ofverbs.QPCap{MaxSendWR: 8, MaxRecvWR: 8, MaxSendSGE: 1, MaxRecvSGE: 1}}); err != nil {
		t.Fatal(err)
	}
	if err := e.qp.ModifyState(ofverbs.QPStateInit); err != nil {
		t.Fatal(err)
	}
	if n, err := e.qp.PostRecv([]ofverbs.RecvWR{{ID: 1, SGL: []ofverbs.SGE{e.mr.SGE(e.buf[:1024])}}}); n != 1 || err != nil {
		t.Fatalf("PostRecv: %d, %v", n, err)
	}
	return e
}

// send posts a signaled Send of msg (from the buffer's second half) and
// checks that the peer receives it.
func (e *rcEP) send(t *testing.T, peer *rcEP, msg string) {
	t.Helper()
	src := e.buf[2048 : 2048+len(msg)]
	copy(src, msg)
	if n, err := e.qp.PostSend([]ofverbs.SendWR{{ID: 7, Opcode: ofverbs.WRSend, SGL: []ofverbs.SGE{e.mr.SGE(src)}, Signaled: true}}); n != 1 || err != nil {
		t.Fatalf("PostSend: %d, %v", n, err)
	}
	if wc := waitWC(t, e.scq, 1, 10*time.Second)[0]; wc.Err() != nil || wc.ID != 7 {
		t.Fatalf("send completion %+v", wc)
	}
	wc := waitWC(t, peer.rcq, 1, 10*time.Second)[0]
	if wc.Err() != nil || wc.ID != 1 || int(wc.ByteLen) != len(msg) || string(peer.buf[:len(msg)]) != msg {
		t.Fatalf("receive completion %+v, data %q", wc, peer.buf[:len(msg)])
	}
}

// TestCMEstablishedCarriesData: what Connect/Accept hand to the engine is a
// working connection in every MPA mode (client/server, the three RTRs,
// Rev 1, CRC off, markers).
func TestCMEstablishedCarriesData(t *testing.T) {
	srv, cli := startDaemon(t, "-mpa-rtr", "write,read,send"), startDaemon(t)
	sc, cc := srv.open(t), cli.open(t)
	l, err := sc.Listen(":0")
	if err != nil {
		t.Fatal(err)
	}
	for _, opt := range []ofverbs.MPAOptions{{}, {Revision: 1}, {CRC: ofverbs.MPACRCOff}, {Markers: ofverbs.ToggleOn},
		{PeerToPeer: ofverbs.ToggleOn, RTR: ofverbs.RTRWrite}, {PeerToPeer: ofverbs.ToggleOn, RTR: ofverbs.RTRRead}, {PeerToPeer: ofverbs.ToggleOn, RTR: ofverbs.RTRSend}} {
		s, c := newRCEP(t, sc), newRCEP(t, cc)
		if opt.RTR == ofverbs.RTRSend { // the RTR may consume a receive at the responder (the datapath decides)
			s.qp.PostRecv([]ofverbs.RecvWR{{ID: 1, SGL: []ofverbs.SGE{s.mr.SGE(s.buf[:1024])}}})
		}
		done := acceptOne(l, s.qp, ofverbs.ConnParam{}, nil)
		if err := c.qp.Connect(l.Addr(), ofverbs.ConnParam{MPA: opt}); err != nil {
			t.Fatalf("%+v: Connect: %v", opt, err)
		}
		request(t, done)
		c.send(t, s, fmt.Sprintf("hello over RC %+v", opt))
		s.send(t, c, "and back")
	}
}
