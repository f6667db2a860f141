package integration

import (
	"errors"
	"fmt"
	"net/netip"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/iwarpd/iwarpd/ofverbs"
	"github.com/iwarpd/iwarpd/test/daemontest"
	"github.com/iwarpd/iwarpd/test/netns"
)

// rcSizes are the message sizes of the RC opcode tests.
var rcSizes = []int{1, 4096, 65536, 1 << 20, 16 << 20}

// TestRCLoopbackOpcodes: two daemons on 127.0.0.1, one RC connection (the
// CM of ofverbs, MPA Rev 2 with CRC by default); every opcode (Send, Send
// SE, Send with Invalidate, Send SE with Invalidate, RDMA Write, RDMA Read)
// at 1 B, 4 KiB, 64 KiB, 1 MiB and 16 MiB from the initiator to the
// responder, at 4 KiB the other way, and a local invalidate on each side;
// every octet verified, every completion checked.
func TestRCLoopbackOpcodes(t *testing.T) {
	da, db := startRCDaemons(t, "rc", daemontest.Options{})
	ctxA, ctxB := da.Open(t, "rc-server"), db.Open(t, "rc-client")
	srv := newRCEP(t, "server", ctxA, 16<<20, rcAccessAll)
	cli := newRCEP(t, "client", ctxB, 16<<20, rcAccessAll)
	l := listenOn(t, ctxA, 0)
	rcConnect(t, l, srv, cli, ofverbs.MPAOptions{})
	info := cli.qp.ConnInfo()
	if !info.Connected || !info.MPA.CRC || info.MPA.Revision != 2 || string(info.PrivateData) != "server" {
		t.Fatalf("client connection %+v, want MPA Rev 2 with CRC and the server's private data", info)
	}
	if st, err := rcQPState(srv); err != nil || st != ofverbs.QPStateRTS {
		t.Fatalf("server QP in %v (%v), want RTS", st, err)
	}
	for i, size := range rcSizes {
		start := time.Now()
		if err := rcAllOpcodes(cli, srv, size, 1000*(i+1)); err != nil {
			t.Fatalf("client→server: %v", err)
		}
		t.Logf("every opcode at %d octets in %v", size, time.Since(start))
	}
	if err := rcAllOpcodes(srv, cli, 4096, 9000); err != nil {
		t.Fatalf("server→client: %v", err)
	}
	for _, e := range []*rcEP{cli, srv} {
		if _, err := rcLocalInvalidate(e, 777); err != nil {
			t.Fatal(err)
		}
	}
	// Still working after the invalidations.
	if err := rcSend(cli, srv, 100, 42, sendKind{}); err != nil {
		t.Fatal(err)
	}
	// A graceful disconnect: both sides hear of it, nothing is left.
	if err := cli.qp.Disconnect(); err != nil {
		t.Fatal(err)
	}
	for _, e := range []*rcEP{cli, srv} {
		if _, err := waitCM(e, ofverbs.CMDisconnected, 10*time.Second); err != nil {
			t.Error(err)
		}
	}
	da.CheckAlive(t)
	db.CheckAlive(t)
}

// TestRCManyQPs: 8 RC connections between the two daemons exchanging at
// the same time, in both directions (Sends, Writes, Reads of 64 KiB and
// odd sizes), every octet verified.
func TestRCManyQPs(t *testing.T) {
	const pairs, rounds = 8, 60
	da, db := startRCDaemons(t, "rcmany", daemontest.Options{})
	ctxA, ctxB := da.Open(t, "rc-many-a"), db.Open(t, "rc-many-b")
	l := listenOn(t, ctxA, 0)
	var srvs, clis []*rcEP
	for i := range pairs {
		s := newRCEP(t, fmt.Sprintf("server%d", i), ctxA, 1<<16, rcAccessAll)
		c := newRCEP(t, fmt.Sprintf("client%d", i), ctxB, 1<<16, rcAccessAll)
		rcConnect(t, l, s, c, ofverbs.MPAOptions{})
		srvs, clis = append(srvs, s), append(clis, c)
	}
	var wg sync.WaitGroup
	errs := make(chan error, 2*pairs)
	start := time.Now()
	for i := range pairs {
		// Each pair's two directions are driven by one goroutine (an
		// endpoint's buffer halves are shared between directions).
		wg.Add(1)
		go func() {
			defer wg.Done()
			c, s := clis[i], srvs[i]
			for r := range rounds {
				size := []int{1 << 16, 1, 1000 + 37*i, 4096}[r%4]
				from, to := c, s
				if r%2 == 1 {
					from, to = s, c
				}
				base := 100000*(i+1) + 1000*r
				var err error
				switch r % 3 {
				case 0:
					err = rcSend(from, to, size, base, sendKind{solicited: r%4 == 0})
				case 1:
					err = rcWrite(from, to, size, base)
				case 2:
					err = rcRead(from, to, size, base)
				}
				if err != nil {
					errs <- fmt.Errorf("pair %d round %d: %w", i, r, err)
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	t.Logf("%d pairs × %d rounds in %v", pairs, rounds, time.Since(start))
	da.CheckAlive(t)
	db.CheckAlive(t)
}

// TestRCNetns: the opcode test across two network namespaces (one daemon
// in each, -addr its address; the CM listens there), fewer sizes.
func TestRCNetns(t *testing.T) {
	if ok, why := netns.Available(); !ok {
		t.Skip("skipping the network-namespace test: " + why)
	}
	if err := netns.RemoveStale(nsPrefix); err != nil {
		t.Logf("removing stale namespaces: %v", err)
	}
	addrs := [2]netip.Prefix{netip.MustParsePrefix("169.254.78.1/24"), netip.MustParsePrefix("169.254.78.2/24")}
	pair, err := netns.NewPair(fmt.Sprintf("%s%dr", nsPrefix, os.Getpid()), addrs, 1500)
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
	da, db := startRCDaemons(t, "rcns", daemontest.Options{NS: pair})
	ctxA, ctxB := da.Open(t, "rc-ns-server"), db.Open(t, "rc-ns-client")
	srv := newRCEP(t, "server", ctxA, 1<<20, rcAccessAll)
	cli := newRCEP(t, "client", ctxB, 1<<20, rcAccessAll)
	l := listenOn(t, ctxA, 0)
	if l.Addr().Addr() != addrs[0].Addr() {
		t.Fatalf("listener on %v, want %v", l.Addr(), addrs[0].Addr())
	}
	rcConnect(t, l, srv, cli, ofverbs.MPAOptions{})
	if info := cli.qp.ConnInfo(); info.Peer != l.Addr() || info.Local.Addr() != addrs[1].Addr() {
		t.Errorf("connection %v → %v, want %v → %v", info.Local, info.Peer, addrs[1].Addr(), l.Addr())
	}
	for i, size := range []int{1, 65536, 1 << 20} {
		if err := rcAllOpcodes(cli, srv, size, 1000*(i+1)); err != nil {
			t.Fatalf("client→server: %v", err)
		}
	}
	if err := rcAllOpcodes(srv, cli, 65536, 9000); err != nil {
		t.Fatalf("server→client: %v", err)
	}
	if _, err := rcLocalInvalidate(cli, 777); err != nil {
		t.Fatal(err)
	}
	da.CheckAlive(t)
	db.CheckAlive(t)
}
