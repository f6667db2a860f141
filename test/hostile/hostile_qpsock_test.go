package hostile

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/iwarpd/iwarpd/ofverbs"
	"github.com/iwarpd/iwarpd/proto"
	"github.com/iwarpd/iwarpd/test/daemontest"
	"github.com/iwarpd/iwarpd/test/netns"
	"github.com/iwarpd/iwarpd/verbsd/verbsdtest"
	"golang.org/x/sys/unix"
)

// Client-made QP sockets (ABI 5; docs/security.md "Client-made QP
// sockets", docs/design-small-messages.md build plan step 1): the daemon
// adopts a UD or RD QP's socket from its client only when it is a UDP
// socket of the device's family bound to the device address and the port
// it reserved, unconnected, without SO_REUSEADDR/SO_REUSEPORT, in its own
// network namespace; whatever the client does with its copy afterwards
// fails only that QP, never the engine; and the QP's datagrams leave as
// the client's uid.

// qpsockClient is a raw session with a PD and a CQ, for create-qp
// requests with sockets of the test's making.
type qpsockClient struct {
	c  *verbsdtest.Client
	pd uint32
	cq *verbsdtest.CQ
}

func newQPSockClient(t *testing.T, sock string) *qpsockClient {
	t.Helper()
	c, err := verbsdtest.Dial(sock, false)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	pd, err := c.AllocPD()
	if err != nil {
		t.Fatal(err)
	}
	cq, err := c.CreateCQ(64, 0)
	if err != nil {
		t.Fatal(err)
	}
	return &qpsockClient{c: c, pd: pd, cq: cq}
}

var qpsockCaps = proto.QPCaps{MaxSendWR: 8, MaxRecvWR: 8, MaxSendSGE: 1, MaxRecvSGE: 1}

// reserve asks for a UD port and returns the address to bind.
func (q *qpsockClient) reserve(t *testing.T) netip.AddrPort {
	t.Helper()
	a, err := q.c.ReservePort(proto.QPTypeUD, 0)
	if err != nil {
		t.Fatalf("reserve-port: %v", err)
	}
	ap, err := netip.ParseAddrPort(a)
	if err != nil {
		t.Fatalf("reserve-port answered %q: %v", a, err)
	}
	return ap
}

// create asks for a UD QP on port with fd as its socket.
func (q *qpsockClient) create(port uint16, fd int) (*verbsdtest.QP, error) {
	return q.c.CreateQP(q.pd, q.cq, q.cq, qpsockCaps, verbsdtest.QPOptions{Port: port, Socket: fd, HasSocket: true})
}

// udpSocket makes a UDP socket of family (AF_INET), set up by prep
// (options before the bind), bound to ap.
func udpSocket(t *testing.T, family, typ int, ap netip.AddrPort, prep func(fd int)) int {
	t.Helper()
	fd, err := unix.Socket(family, typ|unix.SOCK_CLOEXEC|unix.SOCK_NONBLOCK, 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { unix.Close(fd) })
	if prep != nil {
		prep(fd)
	}
	if ap.IsValid() {
		if err := unix.Bind(fd, sockaddr(ap)); err != nil {
			t.Fatalf("bind %v: %v", ap, err)
		}
	}
	return fd
}

func sockaddr(ap netip.AddrPort) unix.Sockaddr {
	if a := ap.Addr().Unmap(); a.Is4() {
		return &unix.SockaddrInet4{Port: int(ap.Port()), Addr: a.As4()}
	}
	return &unix.SockaddrInet6{Port: int(ap.Port()), Addr: ap.Addr().As16()}
}

// otherNetnsSocket makes a UDP socket bound to ap in a network namespace
// of its own (an OS thread unshared, then discarded): IP_FREEBIND, since
// the address is not there.
func otherNetnsSocket(t *testing.T, ap netip.AddrPort) (int, error) {
	t.Helper()
	type res struct {
		fd  int
		err error
	}
	ch := make(chan res, 1)
	go func() {
		runtime.LockOSThread() // never unlocked: the thread ends with the goroutine
		if err := unix.Unshare(unix.CLONE_NEWNET); err != nil {
			ch <- res{-1, err}
			return
		}
		fd, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
		if err == nil {
			unix.SetsockoptInt(fd, unix.IPPROTO_IP, unix.IP_FREEBIND, 1)
			if err = unix.Bind(fd, sockaddr(ap)); err != nil {
				unix.Close(fd)
			}
		}
		ch <- res{fd, err}
	}()
	r := <-ch
	if r.err == nil {
		t.Cleanup(func() { unix.Close(r.fd) })
	}
	return r.fd, r.err
}

// TestQPSocketRefused: sockets the daemon must not adopt, each refused
// with the errno and a text saying what is wrong, while a well-behaved
// client goes on; then a right one is adopted and the QP works.
func TestQPSocketRefused(t *testing.T) {
	d := daemontest.Start(t, "qpsock", daemontest.Options{Ports: nextPorts()})
	by := startBystander(t, d)
	by.progressed(t, "warm-up")
	q := newQPSockClient(t, d.Sock)

	cases := []struct {
		name string
		want unix.Errno
		text string
		make func(ap netip.AddrPort) (fd int, port uint16, skip string)
	}{
		{"TCP socket", unix.EPROTOTYPE, "not a datagram socket", func(ap netip.AddrPort) (int, uint16, string) {
			return udpSocket(t, unix.AF_INET, unix.SOCK_STREAM, ap, nil), ap.Port(), ""
		}},
		{"another port", unix.EADDRNOTAVAIL, "not to the device address and the port reserved", func(ap netip.AddrPort) (int, uint16, string) {
			return udpSocket(t, unix.AF_INET, unix.SOCK_DGRAM, netip.AddrPortFrom(ap.Addr(), 0), nil), ap.Port(), ""
		}},
		{"another address", unix.EADDRNOTAVAIL, "not to the device address", func(ap netip.AddrPort) (int, uint16, string) {
			return udpSocket(t, unix.AF_INET, unix.SOCK_DGRAM, netip.AddrPortFrom(netip.MustParseAddr("127.0.0.2"), ap.Port()), nil), ap.Port(), ""
		}},
		{"unbound", unix.EADDRNOTAVAIL, "bound to", func(ap netip.AddrPort) (int, uint16, string) {
			return udpSocket(t, unix.AF_INET, unix.SOCK_DGRAM, netip.AddrPort{}, nil), ap.Port(), ""
		}},
		{"connected", unix.EISCONN, "is connected", func(ap netip.AddrPort) (int, uint16, string) {
			fd := udpSocket(t, unix.AF_INET, unix.SOCK_DGRAM, ap, nil)
			if err := unix.Connect(fd, &unix.SockaddrInet4{Port: 9, Addr: [4]byte{127, 0, 0, 1}}); err != nil {
				t.Fatal(err)
			}
			return fd, ap.Port(), ""
		}},
		{"SO_REUSEPORT", unix.EINVAL, "SO_REUSEPORT", func(ap netip.AddrPort) (int, uint16, string) {
			return udpSocket(t, unix.AF_INET, unix.SOCK_DGRAM, ap, func(fd int) {
				unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_REUSEPORT, 1)
			}), ap.Port(), ""
		}},
		{"SO_REUSEADDR", unix.EINVAL, "SO_REUSEADDR", func(ap netip.AddrPort) (int, uint16, string) {
			return udpSocket(t, unix.AF_INET, unix.SOCK_DGRAM, ap, func(fd int) {
				unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_REUSEADDR, 1)
			}), ap.Port(), ""
		}},
		{"IPv6 socket", unix.EAFNOSUPPORT, "not the device's AF_INET", func(ap netip.AddrPort) (int, uint16, string) {
			return udpSocket(t, unix.AF_INET6, unix.SOCK_DGRAM, netip.AddrPortFrom(netip.IPv6Loopback(), ap.Port()), nil), ap.Port(), ""
		}},
		{"not a socket", unix.ENOTSOCK, "not a socket", func(ap netip.AddrPort) (int, uint16, string) {
			fd, err := unix.MemfdCreate("not-a-socket", unix.MFD_CLOEXEC)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { unix.Close(fd) })
			return fd, ap.Port(), ""
		}},
		{"another network namespace", unix.EXDEV, "another network namespace", func(ap netip.AddrPort) (int, uint16, string) {
			fd, err := otherNetnsSocket(t, ap)
			if errors.Is(err, unix.EPERM) {
				return -1, 0, "unshare(CLONE_NEWNET) not permitted here"
			}
			if err != nil {
				t.Fatal(err)
			}
			return fd, ap.Port(), ""
		}},
		{"port not reserved", unix.EINVAL, "not reserved for this session", func(ap netip.AddrPort) (int, uint16, string) {
			// A right socket, but on a port this session did not reserve
			// (the one reserved is given up: create-qp names another).
			other := netip.AddrPortFrom(ap.Addr(), ap.Port()+1)
			return udpSocket(t, unix.AF_INET, unix.SOCK_DGRAM, other, nil), other.Port(), ""
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			ap := q.reserve(t)
			fd, port, skip := tc.make(ap)
			if skip != "" {
				t.Skip(skip)
			}
			qp, err := q.create(port, fd)
			if err == nil {
				t.Fatalf("the daemon adopted a socket it must refuse (%s): QP at %s", tc.name, qp.Addr)
			}
			var ce *verbsdtest.CallError
			if !errors.As(err, &ce) || ce.Errno != tc.want || !strings.Contains(ce.Msg, tc.text) {
				t.Fatalf("refused with %v; want %v and a text naming %q", err, tc.want, tc.text)
			}
			t.Logf("refused: %v", err)
		})
	}
	by.progressed(t, "refused sockets")

	// A right socket: adopted, the QP says so, and it carries a message.
	ap := q.reserve(t)
	fd := udpSocket(t, unix.AF_INET, unix.SOCK_DGRAM, ap, nil)
	qp, err := q.create(ap.Port(), fd)
	if err != nil {
		t.Fatalf("a right socket was refused: %v", err)
	}
	if qp.Addr != ap.String() {
		t.Fatalf("the QP is at %s, its socket at %s", qp.Addr, ap)
	}
	requireClientSocket(t, d.Sock, qp.Addr, true)
	by.progressed(t, "after the adoption")
}

// ctlQP returns what iwarpctl says of the QP at addr (ok false: not listed).
func ctlQP(t *testing.T, sock, addr string) (qi proto.QPInfo, ok bool) {
	t.Helper()
	out, code := ctl(t, sock, "-json", "qps")
	if code != 0 {
		t.Fatalf("iwarpctl qps: exit %d: %s", code, out)
	}
	var qps []proto.QPInfo
	if err := json.Unmarshal([]byte(out), &qps); err != nil {
		t.Fatalf("iwarpctl -json qps: %v: %s", err, out)
	}
	for _, q := range qps {
		if q.Addr == addr {
			return q, true
		}
	}
	return qi, false
}

// requireClientSocket checks with iwarpctl that the QP at addr has (or has
// not) a client-made socket.
func requireClientSocket(t *testing.T, sock, addr string, want bool) {
	t.Helper()
	qi, ok := ctlQP(t, sock, addr)
	if !ok {
		t.Fatalf("iwarpctl does not list a QP at %s", addr)
	}
	if qi.ClientSocket != want {
		t.Fatalf("QP %s: client_socket %v, want %v", addr, qi.ClientSocket, want)
	}
}

// TestQPSocketClientClearsNonblock: the client clears O_NONBLOCK on its
// copy of the QP's socket (the file description the daemon shares) and
// races the daemon for every datagram with blocking reads of its own,
// while datagrams keep arriving: the daemon, which calls the socket only
// with MSG_DONTWAIT, never blocks on it — the well-behaved client's
// messages on the same engine keep flowing. Then the client shuts its
// socket down: that QP alone moves to ERROR.
func TestQPSocketClientClearsNonblock(t *testing.T) {
	d := daemontest.Start(t, "qpsock-block", daemontest.Options{Ports: nextPorts(), Extra: []string{"-engines", "1"}})
	by := startBystander(t, d)
	by.progressed(t, "warm-up")
	q := newQPSockClient(t, d.Sock)
	ap := q.reserve(t)
	fd := udpSocket(t, unix.AF_INET, unix.SOCK_DGRAM, ap, nil)
	qp, err := q.create(ap.Port(), fd)
	if err != nil {
		t.Fatal(err)
	}
	if err := qp.ToRTS(); err != nil {
		t.Fatal(err)
	}
	// The hostile part: blocking, and readers of its own.
	fl, err := unix.FcntlInt(uintptr(fd), unix.F_GETFL, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := unix.FcntlInt(uintptr(fd), unix.F_SETFL, fl&^unix.O_NONBLOCK); err != nil {
		t.Fatal(err)
	}
	var stolen sync.WaitGroup
	var mu sync.Mutex
	took := 0
	for range 4 {
		stolen.Add(1)
		go func() {
			defer stolen.Done()
			buf := make([]byte, 2048)
			for range 1_000_000 {
				n, _, err := unix.Recvfrom(fd, buf, 0) // blocking: the file is
				if n <= 0 || err != nil {
					return // shut down (below)
				}
				mu.Lock()
				took++
				mu.Unlock()
			}
		}()
	}
	shut := sync.OnceFunc(func() { unix.Shutdown(fd, unix.SHUT_RDWR) })
	t.Cleanup(func() { shut(); stolen.Wait() })
	src := udpSocket(t, unix.AF_INET, unix.SOCK_DGRAM, netip.AddrPortFrom(ap.Addr(), 0), nil)
	junk := make([]byte, 64) // no valid key header: the daemon reads and drops it
	for round := range 20 {
		for range 200 {
			unix.Sendto(src, junk, unix.MSG_DONTWAIT, sockaddr(ap))
		}
		by.progressed(t, fmt.Sprintf("blocking-copy round %d", round))
	}
	mu.Lock()
	t.Logf("the client's blocking readers took %d of 4000 datagrams, the daemon the rest", took)
	mu.Unlock()
	// Silence on the socket now: a daemon read that blocked would wait
	// for ever.
	for i := range 5 {
		by.progressed(t, fmt.Sprintf("after the flood (%d)", i))
	}
	// The client shuts its socket down: that QP fails, alone.
	shut()
	daemontest.Eventually(t, "the QP whose socket was shut down moves to ERROR", daemontest.Scaled(10*time.Second), func() bool {
		qi, _ := ctlQP(t, d.Sock, qp.Addr)
		return qi.State == "ERROR"
	})
	by.progressed(t, "after the shutdown")
	if err := qp.Modify(proto.QPStateReset); err == nil {
		t.Fatal("a QP whose socket failed left ERROR")
	}
	if !d.Stop() {
		t.Fatal("SIGTERM did not stop the daemon within the bound: the engine is blocked")
	}
}

func init() { helpers["qpsock-uid"] = helperQPSockUID }

// helperQPSockUID (an unprivileged uid, in the daemon's namespace) sends
// n UD messages between two QPs of ofverbs (sockets made by ofverbs
// itself unless IWARPD_QP_SOCKET says otherwise) and says "ready n".
func helperQPSockUID() int {
	n, _ := strconv.Atoi(os.Getenv(envArg))
	sent, err := udExchange(os.Getenv(envSock), n)
	if err != nil {
		return helperFail("%v", err)
	}
	helperReady(strconv.Itoa(sent))
	time.Sleep(helperLifetime())
	return 0
}

// TestQPSocketOwnerUID: in a network namespace the test makes, with an
// nftables counter of the UDP packets uid 1001 sends, a client of uid
// 1001 exchanges UD messages through a root daemon: every datagram leaves
// as uid 1001 (the client made the sockets). The same client with
// IWARPD_QP_SOCKET=daemon (the daemon's sockets, as before ABI 5): none
// does — they leave as root.
func TestQPSocketOwnerUID(t *testing.T) {
	pair := newQPSockNetns(t)
	ns := pair.Names[0]
	for _, args := range [][]string{
		{"add", "table", "inet", "qpsock"},
		{"add", "chain", "inet", "qpsock", "out", "{ type filter hook output priority 0 ; }"},
		{"add", "rule", "inet", "qpsock", "out", "meta", "l4proto", "udp", "meta", "skuid", strconv.Itoa(otherUID), "counter"},
		{"add", "rule", "inet", "qpsock", "out", "meta", "l4proto", "udp", "counter"},
	} {
		if out, err := pair.Command(0, "nft", args...).CombinedOutput(); err != nil {
			t.Fatalf("nft %v in %s: %v: %s", args, ns, err, out)
		}
	}
	d := daemontest.Start(t, "qpsock-uid", daemontest.Options{Ports: nextPorts(), NS: pair, NSIdx: 0, Addr: pair.Addrs[0].Addr().String(),
		Extra: []string{"-socket-mode", "0666"}})
	openSocket(t, d)
	bin := accessibleTestBinary(t)
	wrap := []string{"ip", "netns", "exec", ns, "setpriv", "--reuid", strconv.Itoa(otherUID), "--regid", strconv.Itoa(otherUID), "--clear-groups"}
	const msgs = 50
	for _, tc := range []struct {
		name   string
		env    []string
		client bool
	}{{"client-made sockets", nil, true}, {"IWARPD_QP_SOCKET=daemon", []string{"IWARPD_QP_SOCKET=daemon"}, false}} {
		uid0, all0 := udpCounters(t, pair)
		p := spawnHostileWrapped(t, "qpsock-uid", d.Sock, strconv.Itoa(msgs), wrap, bin, nil, tc.env...)
		if p.info != strconv.Itoa(msgs) {
			t.Fatalf("%s: the uid %d client sent %q messages, want %d: %s", tc.name, otherUID, p.info, msgs, p.stderr)
		}
		uid1, all1 := udpCounters(t, pair)
		p.kill()
		t.Logf("%s: %d UDP packets sent, %d of them as uid %d", tc.name, all1-all0, uid1-uid0, otherUID)
		if all1-all0 < msgs {
			t.Fatalf("%s: only %d UDP packets counted for %d messages: the counter does not see the QPs' traffic", tc.name, all1-all0, msgs)
		}
		if tc.client && uid1-uid0 < msgs {
			t.Errorf("%s: %d of the %d messages' packets left as uid %d: the QPs' sockets are not the client's", tc.name, uid1-uid0, msgs, otherUID)
		}
		if !tc.client && uid1 != uid0 {
			t.Errorf("%s: %d packets left as uid %d, want none (the daemon's sockets are root's)", tc.name, uid1-uid0, otherUID)
		}
	}
}

// udpCounters reads the two counters of TestQPSocketOwnerUID's chain:
// UDP packets of uid 1001, all UDP packets.
func udpCounters(t *testing.T, pair *netns.Pair) (uid, all int64) {
	t.Helper()
	out, err := pair.Command(0, "nft", "list", "chain", "inet", "qpsock", "out").CombinedOutput()
	if err != nil {
		t.Fatalf("nft list: %v: %s", err, out)
	}
	var got []int64
	for _, line := range strings.Split(string(out), "\n") {
		f := strings.Fields(line)
		for i := 0; i+1 < len(f); i++ {
			if f[i] == "packets" {
				v, _ := strconv.ParseInt(f[i+1], 10, 64)
				got = append(got, v)
			}
		}
	}
	if len(got) != 2 {
		t.Fatalf("nft list: want two counters: %s", out)
	}
	return got[0], got[1]
}

// accessibleTestBinary copies the test binary where another uid may run it.
func accessibleTestBinary(t *testing.T) string {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root to run a client as another user")
	}
	dir := t.TempDir()
	openDirs(t, dir)
	b, err := os.ReadFile(os.Args[0])
	if err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(dir, "hostile.test")
	if err := os.WriteFile(bin, b, 0o755); err != nil {
		t.Fatal(err)
	}
	return bin
}

// newQPSockNetns makes a namespace pair for TestQPSocketOwnerUID (skips
// where namespaces or nft are missing); cleanup deletes it.
func newQPSockNetns(t *testing.T) *netns.Pair {
	t.Helper()
	if ok, why := netns.Available(); !ok {
		t.Skip("skipping the network-namespace test: " + why)
	}
	for _, tool := range []string{"nft", "setpriv"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("skipping: %s not installed", tool)
		}
	}
	const prefix = "iwqs"
	if err := netns.RemoveStale(prefix); err != nil {
		t.Logf("removing stale namespaces: %v", err)
	}
	addrs := [2]netip.Prefix{netip.MustParsePrefix("169.254.81.1/24"), netip.MustParsePrefix("169.254.81.2/24")}
	pair, err := netns.NewPair(fmt.Sprintf("%s%d", prefix, os.Getpid()), addrs, 1500)
	if errors.Is(err, netns.ErrNotPermitted) {
		t.Skip("skipping the network-namespace test: ", err)
	}
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := pair.Close(); err != nil {
			t.Errorf("deleting the namespaces: %v", err)
		}
	})
	return pair
}

// udExchange opens sock with ofverbs, makes two UD QPs and sends n
// messages from the first to the second, each received and checked
// before the next; it returns how many arrived.
func udExchange(sock string, n int) (int, error) {
	ctx, err := ofverbs.Open(ofverbs.WithSocket(sock), ofverbs.WithClientName("qpsock"))
	if err != nil {
		return 0, err
	}
	defer ctx.Close()
	pd, err := ctx.AllocPD()
	if err != nil {
		return 0, err
	}
	buf, err := ctx.AllocBuffer(512)
	if err != nil {
		return 0, err
	}
	mem := buf.Bytes()
	mr, err := pd.RegMR(mem, ofverbs.AccessLocalWrite)
	if err != nil {
		return 0, err
	}
	cq, err := ctx.CreateCQ(64, nil)
	if err != nil {
		return 0, err
	}
	var qps [2]*ofverbs.QP
	for i := range qps {
		if qps[i], err = pd.CreateQP(ofverbs.QPInitAttr{Type: ofverbs.QPTypeUD, SendCQ: cq, RecvCQ: cq,
			Cap: ofverbs.QPCap{MaxSendWR: 8, MaxRecvWR: 8, MaxSendSGE: 1, MaxRecvSGE: 1}}); err != nil {
			return 0, err
		}
		if err := qps[i].ModifyState(ofverbs.QPStateInit, ofverbs.QPStateRTR, ofverbs.QPStateRTS); err != nil {
			return 0, err
		}
	}
	ah, err := pd.CreateAHTo(qps[1].Endpoint())
	if err != nil {
		return 0, err
	}
	src, dst := mem[:256], mem[256:]
	wcs := make([]ofverbs.WC, 4)
	got := 0
	for k := range n {
		if _, err := qps[1].PostRecv([]ofverbs.RecvWR{{ID: uint64(k), SGL: []ofverbs.SGE{mr.SGE(dst)}}}); err != nil {
			return got, err
		}
		src[0] = byte(k)
		if _, err := qps[0].PostSend([]ofverbs.SendWR{{ID: uint64(k), Opcode: ofverbs.WRSend, AH: ah, Signaled: true,
			SGL: []ofverbs.SGE{mr.SGE(src)}}}); err != nil {
			return got, err
		}
		done := 0
		deadline := time.Now().Add(daemontest.Scaled(10 * time.Second))
		for done < 2 && time.Now().Before(deadline) {
			m, err := cq.Poll(wcs)
			if err != nil {
				return got, err
			}
			for _, wc := range wcs[:m] {
				if err := wc.Err(); err != nil {
					return got, fmt.Errorf("message %d: %w", k, err)
				}
			}
			done += m
			if m == 0 {
				time.Sleep(50 * time.Microsecond)
			}
		}
		if done < 2 {
			return got, fmt.Errorf("message %d: not completed within the bound", k)
		}
		if dst[0] != byte(k) {
			return got, fmt.Errorf("message %d arrived as %d", k, dst[0])
		}
		got++
	}
	return got, nil
}
