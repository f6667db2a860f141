package e2e

import (
	"bytes"
	"errors"
	"fmt"
	"net/netip"
	"path/filepath"
	"testing"
	"time"

	"github.com/iwarpd/iwarpd/llp/dgram"
	"github.com/iwarpd/iwarpd/test/daemontest"
	"github.com/iwarpd/iwarpd/verbsd/config"

	"github.com/iwarpd/iwarpd/proto"
	"github.com/iwarpd/iwarpd/verbsd"
	"github.com/iwarpd/iwarpd/verbsd/verbsdtest"
	"golang.org/x/sys/unix"
)

// scaled stretches a timeout on slow machines (IWARPD_TEST_TIMEOUT_SCALE).
var scaled = daemontest.Scaled

func wait() time.Duration { return scaled(10 * time.Second) }

// portBlocks gives each server of this package 100 ports of its own:
// 20000-23899, below the kernel's ephemeral range and apart from the other
// suites' blocks (test/daemontest doc.go); a server skips a port in use.
var portBlocks = daemontest.Blocks{Base: 20000, Size: 100, Count: 39}

// serve starts a server in the test process on the next port block (UD on
// all of it; with rd, UD on the first half and RD on the second), with
// IWARPD_TEST_ENGINES engines (docs/engines.md) and mutate applied last,
// and returns it and its control socket; cleanup closes it. Every server
// of the package starts here (startServer, startRD, startFast, rcServer).
func serve(t testing.TB, rd bool, mutate ...func(*config.Config)) (*verbsd.Server, string) {
	t.Helper()
	cfg := config.DefaultConfig()
	if n := verbsdtest.Engines(); n > 0 {
		cfg.Engines = n
	}
	first, last := portBlocks.NextRange()
	cfg.UDPorts = dgram.PortRange{First: uint16(first), Last: uint16(last)}
	cfg.RDPorts = dgram.PortRange{}
	if rd {
		mid := uint16(first + (last-first+1)/2)
		cfg.UDPorts.Last, cfg.RDPorts = mid-1, dgram.PortRange{First: mid, Last: uint16(last)}
	}
	for _, m := range mutate {
		if m != nil {
			m(&cfg)
		}
	}
	srv, err := verbsd.NewServer(cfg)
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "iwarpd.sock")
	l, err := verbsd.Listen(path)
	if err != nil {
		t.Fatal(err)
	}
	go srv.Serve(l)
	t.Cleanup(func() { srv.Close() })
	return srv, path
}

// startServer starts a UD server (serve).
func startServer(t testing.TB, mutate func(*config.Config)) (*verbsd.Server, string) {
	t.Helper()
	return serve(t, false, mutate)
}

func dial(t testing.TB, path string) *verbsdtest.Client {
	t.Helper()
	c, err := verbsdtest.Dial(path, false)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	return c
}

// must(f())(t) returns f's value or fails t.
func must[T any](v T, err error) func(testing.TB) T {
	return func(t testing.TB) T {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
}

func wantErrno(t testing.TB, what string, err error, want unix.Errno) {
	t.Helper()
	if !errors.Is(err, want) {
		t.Errorf("%s: err = %v, want %v", what, err, want)
	}
}

// node is one client with a PD, a buffer, CQs and a UD QP in RTS.
type node struct {
	c        *verbsdtest.Client
	pd       uint32
	mr       *verbsdtest.MR
	scq, rcq *verbsdtest.CQ
	qp       *verbsdtest.QP
}

var defaultCaps = proto.QPCaps{MaxSendWR: 256, MaxRecvWR: 256, MaxSendSGE: 4, MaxRecvSGE: 4, MaxInline: 128}

func newNode(t testing.TB, path string, bufSize int, opts verbsdtest.QPOptions) *node {
	t.Helper()
	n := &node{c: dial(t, path)}
	n.setup(t, bufSize, opts)
	return n
}

func (n *node) setup(t testing.TB, bufSize int, opts verbsdtest.QPOptions) {
	t.Helper()
	n.pd = must(n.c.AllocPD())(t)
	n.mr = must(n.c.RegMR(n.pd, bufSize, proto.AccessLocalWrite))(t)
	n.scq = must(n.c.CreateCQ(1024, 0))(t)
	n.rcq = must(n.c.CreateCQ(1024, 0))(t)
	n.qp = must(n.c.CreateQP(n.pd, n.scq, n.rcq, defaultCaps, opts))(t)
	if err := n.qp.ToRTS(); err != nil {
		t.Fatal(err)
	}
}

func (n *node) ah(t testing.TB, peer *node) proto.AddressVector {
	t.Helper()
	return must(n.c.CreateAH(n.pd, peer.qp.Addr))(t)
}

func (n *node) postRecv(t testing.TB, wrid uint64, off, length int) {
	t.Helper()
	if err := n.c.PostRecv(n.qp.RQ, wrid, []proto.SGE{n.mr.SGE(off, length)}); err != nil {
		t.Fatal(err)
	}
}

func (n *node) send(t testing.TB, ah proto.AddressVector, wrid uint64, flags uint8, off, length int) {
	t.Helper()
	e := proto.SQE{WRID: wrid, Opcode: proto.WRSend, Flags: flags, AH: ah}
	for {
		err := n.qp.PostSend(e, []proto.SGE{n.mr.SGE(off, length)}, nil)
		if err == nil {
			return
		}
		if !errors.Is(err, verbsdtest.ErrFull) {
			t.Fatal(err)
		}
		n.scq.Poll()
		time.Sleep(10 * time.Microsecond)
	}
}

// waitCQEs waits (wait()) for n completions of cq, or fails t.
func waitCQEs(t testing.TB, cq *verbsdtest.CQ, n int, what string) []proto.CQE {
	t.Helper()
	return waitCQEsWithin(t, cq, n, what, wait())
}

// waitCQEsWithin waits at most d for n completions of cq, or fails t.
func waitCQEsWithin(t testing.TB, cq *verbsdtest.CQ, n int, what string, d time.Duration) []proto.CQE {
	t.Helper()
	got := cq.Wait(n, d)
	if len(got) != n {
		t.Fatalf("%s: %d completions, want %d: %+v", what, len(got), n, got)
	}
	return got
}

func fill(b []byte, seed int) {
	for i := range b {
		b[i] = byte(i*7 + seed*13 + i>>8)
	}
}

func checkBytes(t testing.TB, what string, got, want []byte) {
	t.Helper()
	if !bytes.Equal(got, want) {
		i := 0
		for i < len(got) && i < len(want) && got[i] == want[i] {
			i++
		}
		t.Fatalf("%s: payload differs at octet %d of %d", what, i, len(want))
	}
}

func inspect(t testing.TB, path string) proto.Inspect {
	t.Helper()
	c, err := verbsdtest.Dial(path, true)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	return must(c.Inspect())(t)
}

func qpCounters(t testing.TB, path string, qpn uint32) map[string]int64 {
	t.Helper()
	for _, s := range inspect(t, path).Sessions {
		for _, q := range s.QPs {
			if q.QPN == qpn {
				return q.Counters
			}
		}
	}
	t.Fatalf("QP %d not in inspect", qpn)
	return nil
}

func addrOf(t testing.TB, s string) netip.AddrPort {
	t.Helper()
	a, err := netip.ParseAddrPort(s)
	if err != nil {
		t.Fatal(err)
	}
	return a
}

var _ = fmt.Sprint

// dgramNode is a UD or RD QP in RTS (verbsdtest's raw client) with one
// registered buffer and CQs of 4096 entries.
type dgramNode struct {
	c        *verbsdtest.Client
	pd       uint32
	mr       *verbsdtest.MR
	scq, rcq *verbsdtest.CQ
	qp       *verbsdtest.QP
}

// newDgramNode dials path and makes a dgramNode of typ: a buffer of size
// octets registered with local write and access, an SQ of sqDepth entries,
// 1024 receives, 4 SGEs, 64 inline octets.
func newDgramNode(t *testing.T, path string, size int, typ proto.QPType, access proto.Access, sqDepth uint32) *dgramNode {
	t.Helper()
	c, err := verbsdtest.Dial(path, false)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	n := &dgramNode{c: c}
	check := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	n.pd, err = c.AllocPD()
	check(err)
	n.mr, err = c.RegMR(n.pd, size, proto.AccessLocalWrite|access)
	check(err)
	n.scq, err = c.CreateCQ(4096, 0)
	check(err)
	n.rcq, err = c.CreateCQ(4096, 0)
	check(err)
	caps := proto.QPCaps{MaxSendWR: sqDepth, MaxRecvWR: 1024, MaxSendSGE: 4, MaxRecvSGE: 4, MaxInline: 64}
	n.qp, err = c.CreateQP(n.pd, n.scq, n.rcq, caps, verbsdtest.QPOptions{Type: typ})
	check(err)
	check(n.qp.ToRTS())
	return n
}
