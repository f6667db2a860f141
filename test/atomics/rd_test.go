package atomics

import (
	"bytes"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
	"unsafe"

	"github.com/iwarpd/iwarpd/ofverbs"
	"github.com/iwarpd/iwarpd/test/daemontest"
	"github.com/iwarpd/iwarpd/test/netns"
)

// rdHammer runs the FetchAdd counter over RD: the target's QP owns the
// counter; each client QP sends ops FetchAdds through an address handle;
// the owner adds with CPU atomics meanwhile. The final value is exact and
// every fetched value unique.
func rdHammer(t *testing.T, target *ep, clients []*ep, ops, local int, daemons ...*daemontest.Daemon) {
	t.Helper()
	counter := (*uint64)(unsafe.Pointer(&target.mem[0]))
	defer func() {
		if t.Failed() {
			for _, d := range daemons {
				t.Logf("%s counters:\n%s", d.Name, counters(d))
			}
		}
	}()
	results := make([][]uint64, len(clients)+1)
	errs := make([]error, len(clients))
	var wg sync.WaitGroup
	for i, c := range clients {
		ah := c.ahTo(t, target.qp.Endpoint())
		wg.Add(1)
		go func() {
			defer wg.Done()
			results[i], errs[i] = c.hammer(ops, 8, target.mr.RKey(), target.addr(0), ah)
		}()
	}
	wg.Add(1)
	go func() {
		defer wg.Done()
		for range local {
			results[len(clients)] = append(results[len(clients)], atomic.AddUint64(counter, 1)-1)
			if len(results[len(clients)])%16 == 0 {
				time.Sleep(10 * time.Microsecond)
			}
		}
	}()
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	var all []uint64
	for _, r := range results {
		all = append(all, r...)
	}
	total := uint64(len(clients)*ops + local)
	if got := atomic.LoadUint64(counter); got != total || uint64(len(all)) != total {
		t.Fatalf("counter %d after %d operations (%d results)", got, total, len(all))
	}
	if err := checkUnique(all); err != nil {
		t.Fatal(err)
	}
}

// TestRDFetchAddCounter: the counter over RD on loopback, clients on both
// hosts.
func TestRDFetchAddCounter(t *testing.T) {
	da := startDaemon(t, "rd-a", daemontest.Options{})
	db := startDaemon(t, "rd-b", daemontest.Options{})
	target := newEP(t, da, "target", ofverbs.QPTypeRD, accessAll)
	var clients []*ep
	for i, d := range []*daemontest.Daemon{da, da, db, db} {
		clients = append(clients, newEP(t, d, fmt.Sprintf("rd-client%d", i), ofverbs.QPTypeRD, ofverbs.AccessLocalWrite))
	}
	rdHammer(t, target, clients, 400, 400)
}

// rdImmediate sends Sends with Immediate (with and without Solicited
// Event, one datagram and several) from cli to srv's QP over RD or UD and
// checks data and value in the receive completions.
func rdImmediate(t *testing.T, srv, cli *ep, sizes []int) {
	t.Helper()
	ah := cli.ahTo(t, srv.qp.Endpoint())
	for i := range 2 * len(sizes) {
		if err := srv.postRecv(uint64(i), 0, bufLen); err != nil {
			t.Fatal(err)
		}
		size, solicited := sizes[i/2], i%2 == 1
		for k := range size {
			cli.mem[k] = byte(k*13 + i)
		}
		imm := uint32(0xa0000000 + i)
		if err := cli.post(ofverbs.SendWR{ID: uint64(i), Opcode: ofverbs.WRSendWithImm, Signaled: true, Imm: imm,
			Solicited: solicited, AH: ah, SGL: []ofverbs.SGE{cli.mr.SGE(cli.mem[:size])}}); err != nil {
			t.Fatal(err)
		}
		if wc, err := cli.one(cli.scq); err != nil || wc.Err() != nil || wc.Opcode != ofverbs.WCSend {
			t.Fatalf("send %d: %+v (%v)", i, wc, err)
		}
		wc, err := srv.one(srv.rcq)
		if err != nil || wc.Err() != nil || wc.Opcode != ofverbs.WCRecv || wc.ByteLen != uint32(size) ||
			wc.Flags&ofverbs.WCFlagImm == 0 || wc.Imm != imm || wc.Solicited() != solicited || wc.Src != cli.qp.Addr() {
			t.Fatalf("receive %d (%d bytes, imm %#x, solicited %v): %+v (%v)", i, size, imm, solicited, wc, err)
		}
		if !bytes.Equal(srv.mem[:size], cli.mem[:size]) {
			t.Fatalf("message %d: data differs", i)
		}
	}
}

// TestRDImmediate: Send with Immediate and Write-Record with Immediate
// over RD, one and several datagrams; a refused Write-Record with
// Immediate.
func TestRDImmediate(t *testing.T) {
	da := startDaemon(t, "rdimm-a", daemontest.Options{})
	db := startDaemon(t, "rdimm-b", daemontest.Options{})
	srv := newEP(t, da, "rd-server", ofverbs.QPTypeRD, accessAll)
	cli := newEP(t, db, "rd-client", ofverbs.QPTypeRD, ofverbs.AccessLocalWrite)
	t.Run("send-imm", func(t *testing.T) { rdImmediate(t, srv, cli, []int{0, 100, 60000}) })
	t.Run("write-record-imm", func(t *testing.T) { wrecImmediate(t, srv, cli, []int{0, 100, 60000}) })
	t.Run("write-record-imm-refused", func(t *testing.T) { wrecImmRefused(t, srv, cli, true) })
}

// TestRDCmpSwapLock: the CmpSwap lock over RD, clients on both hosts.
func TestRDCmpSwapLock(t *testing.T) {
	da := startDaemon(t, "rdlock-a", daemontest.Options{})
	db := startDaemon(t, "rdlock-b", daemontest.Options{})
	target := newEP(t, da, "target", ofverbs.QPTypeRD, accessAll)
	var clients []*ep
	for i, d := range []*daemontest.Daemon{da, db, db} {
		clients = append(clients, newEP(t, d, fmt.Sprintf("rd-locker%d", i), ofverbs.QPTypeRD, ofverbs.AccessLocalWrite))
	}
	rdLock(t, target, clients, 30)
}

// rdLock runs rdLockLoop from every client against target's lock (word 0)
// and protected word (8).
func rdLock(t *testing.T, target *ep, clients []*ep, rounds int) {
	t.Helper()
	errs := make([]error, len(clients))
	var wg sync.WaitGroup
	for i, c := range clients {
		ah := c.ahTo(t, target.qp.Endpoint())
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = rdLockLoop(c, uint64(i+1), rounds, target.mr.RKey(), target.addr(0), ah)
		}()
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	if got := target.word(8); got != uint64(len(clients)*rounds) || target.word(0) != 0 {
		t.Fatalf("protected counter %d (lock word %d), want %d", got, target.word(0), len(clients)*rounds)
	}
}

// rdLockLoop is lockLoop over RD, which has no RDMA Write: inside the lock
// the protected word is read (RDMA Read) and incremented with a CmpSwap
// from the value read, which must find that value (no one else changes it
// while the lock is held).
func rdLockLoop(e *ep, me uint64, rounds int, rkey uint32, base uint64, ah *ofverbs.AH) error {
	id := uint64(0)
	next := func() uint64 { id++; return id }
	cas := func(off, cmp, swap uint64) (uint64, error) {
		v, _, err := e.atomicOnce(next(), ofverbs.WRCmpSwap, rkey, base+off, cmp, swap, ah)
		return v, err
	}
	for range rounds {
		for tries := 0; ; tries++ {
			orig, err := cas(0, 0, me)
			if err != nil {
				return err
			}
			if orig == 0 {
				break
			}
			if tries > 100000 {
				return fmt.Errorf("%s: lock held by %d for %d tries", e.name, orig, tries)
			}
		}
		if err := e.post(ofverbs.SendWR{ID: next(), Opcode: ofverbs.WRRDMARead, Signaled: true, RKey: rkey, RemoteAddr: base + 8,
			AH: ah, SGL: []ofverbs.SGE{e.mr.SGE(e.mem[128:136])}}); err != nil {
			return err
		}
		if wc, err := e.one(e.scq); err != nil || wc.Err() != nil {
			return fmt.Errorf("%s: read: %+v %v", e.name, wc, err)
		}
		v := e.word(128)
		// Nobody else may change the word while we hold the lock.
		if orig, err := cas(8, v, v+1); err != nil || orig != v {
			return fmt.Errorf("%s: protected word changed under the lock: read %d, found %d (%v)", e.name, v, orig, err)
		}
		if owner, err := cas(0, me, me); err != nil || owner != me {
			return fmt.Errorf("%s: inside the lock the owner is %d (%v)", e.name, owner, err)
		}
		if orig, err := cas(0, me, 0); err != nil || orig != me {
			return fmt.Errorf("%s: releasing: owner %d (%v)", e.name, orig, err)
		}
	}
	return nil
}

// TestRDAtomicViolations: every access violation of an Atomic Request over
// RD completes the requester's work request with a remote access error
// (the responder's error message), modifies nothing, and leaves both QPs
// serving: the next atomic succeeds.
func TestRDAtomicViolations(t *testing.T) {
	da := startDaemon(t, "rdviol-a", daemontest.Options{})
	db := startDaemon(t, "rdviol-b", daemontest.Options{})
	target := newEP(t, da, "target", ofverbs.QPTypeRD, accessAll)
	buf, err := target.ctx.AllocBuffer(4096)
	if err != nil {
		t.Fatal(err)
	}
	noAtomic, err := target.pd.RegMR(buf.Bytes(), ofverbs.AccessLocalWrite|ofverbs.AccessRemoteRead|ofverbs.AccessRemoteWrite)
	if err != nil {
		t.Fatal(err)
	}
	for i := range target.mem {
		target.mem[i] = byte(i)
	}
	before, beforeNA := bytes.Clone(target.mem), bytes.Clone(buf.Bytes())
	cli := newEP(t, db, "rd-violator", ofverbs.QPTypeRD, ofverbs.AccessLocalWrite)
	ah := cli.ahTo(t, target.qp.Endpoint())
	const termInvalidStag, termBounds, termRights = 0x000100, 0x000101, 0x000102
	cases := []struct {
		name  string
		op    ofverbs.SendOpcode
		rkey  uint32
		raddr uint64
		term  uint32
	}{
		{"no remote atomic access", ofverbs.WRFetchAdd, noAtomic.RKey(), noAtomic.Addr(), termRights},
		{"misaligned", ofverbs.WRFetchAdd, target.mr.RKey(), target.addr(4), termBounds},
		{"misaligned cmpswap", ofverbs.WRCmpSwap, target.mr.RKey(), target.addr(1), termBounds},
		{"beyond the region", ofverbs.WRFetchAdd, target.mr.RKey(), target.addr(bufLen), termBounds},
		{"straddling the end", ofverbs.WRCmpSwap, target.mr.RKey(), target.addr(bufLen - 4), termBounds},
		{"before the region", ofverbs.WRFetchAdd, target.mr.RKey(), target.addr(0) - 8, termBounds},
		{"invalid STag", ofverbs.WRFetchAdd, target.mr.RKey() + 0x100, target.addr(0), termInvalidStag},
	}
	for i, c := range cases {
		_, wc, err := cli.atomicOnce(uint64(i+1), c.op, c.rkey, c.raddr, 5, 6, ah)
		if err == nil || wc.Status != ofverbs.WCRemAccessErr || wc.Flags&ofverbs.WCFlagTermValid == 0 || wc.Term != c.term {
			t.Fatalf("%s: completion %+v (%v), want remote access error %#x", c.name, wc, err, c.term)
		}
	}
	if !bytes.Equal(target.mem, before) || !bytes.Equal(buf.Bytes(), beforeNA) {
		t.Fatal("a refused atomic modified the target's memory")
	}
	// Both QPs still serve: a valid FetchAdd goes through.
	want := target.word(16)
	got, _, err := cli.atomicOnce(100, ofverbs.WRFetchAdd, target.mr.RKey(), target.addr(16), 3, 0, ah)
	if err != nil || got != want || target.word(16) != want+3 {
		t.Fatalf("after the violations: fetched %#x (%v), want %#x; word now %#x", got, err, want, target.word(16))
	}
}

// TestRDNetnsLoss: two daemons in network namespaces, 5 % of the packets
// each one receives dropped (nftables, one wire packet at a time): the RD
// FetchAdd counter (clients on both hosts), the CmpSwap lock, Send with
// Immediate and Write-Record with Immediate are exact.
func TestRDNetnsLoss(t *testing.T) {
	if ok, why := netns.Available(); !ok {
		t.Skip("skipping the network-namespace test: " + why)
	}
	if _, err := exec.LookPath("nft"); err != nil {
		t.Skip("skipping: nft not installed")
	}
	const prefix = "iwat"
	if err := netns.RemoveStale(prefix); err != nil {
		t.Logf("removing stale namespaces: %v", err)
	}
	addrs := [2]netip.Prefix{netip.MustParsePrefix("169.254.79.1/24"), netip.MustParsePrefix("169.254.79.2/24")}
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
	if err := setLoss(pair, 5); err != nil {
		t.Fatal(err)
	}
	da := startDaemon(t, "loss-a", daemontest.Options{NS: pair, NSIdx: 0, Addr: addrs[0].Addr().String()})
	db := startDaemon(t, "loss-b", daemontest.Options{NS: pair, NSIdx: 1, Addr: addrs[1].Addr().String()})
	target := newEP(t, da, "target", ofverbs.QPTypeRD, accessAll)
	var clients []*ep
	for i, d := range []*daemontest.Daemon{da, db, db} {
		clients = append(clients, newEP(t, d, fmt.Sprintf("loss-client%d", i), ofverbs.QPTypeRD, ofverbs.AccessLocalWrite))
	}
	t.Run("fetchadd", func(t *testing.T) { rdHammer(t, target, clients, 300, 300, da, db) })
	lockTarget := newEP(t, da, "lock-target", ofverbs.QPTypeRD, accessAll)
	t.Run("cmpswap-lock", func(t *testing.T) { rdLock(t, lockTarget, clients, 15) })
	srv := newEP(t, da, "imm-server", ofverbs.QPTypeRD, accessAll)
	t.Run("send-imm", func(t *testing.T) { rdImmediate(t, srv, clients[1], []int{10, 5000}) })
	t.Run("write-record-imm", func(t *testing.T) { wrecImmediate(t, srv, clients[1], []int{10, 5000, 60000}) })
	for _, d := range []*daemontest.Daemon{da, db} {
		for _, l := range strings.Split(counters(d), "\n") {
			if strings.Contains(l, "rd_retransmits") || strings.Contains(l, "atomic") {
				t.Logf("%s: %s", d.Name, strings.TrimSpace(l))
			}
		}
	}
}

// counters is iwarpctl counters of d.
func counters(d *daemontest.Daemon) string {
	out, err := exec.Command(daemontest.Bins["iwarpctl"], "-socket", d.Sock, "counters").CombinedOutput()
	if err != nil {
		return fmt.Sprintf("iwarpctl: %v: %s", err, out)
	}
	return string(out)
}

// setLoss makes each namespace of p drop pct % of the TCP and UDP packets
// it receives (nftables input hook, numgen random), one wire packet at a
// time (gso_max_segs 1 on both veth ends; cmd/iwarp-bench netns.go).
func setLoss(p *netns.Pair, pct int) error {
	for i, ns := range p.Names {
		for _, args := range [][]string{
			{"-n", ns, "link", "set", p.Links[i], "gso_max_segs", "1"},
			{"netns", "exec", ns, "nft", "add", "table", "inet", "iwarp_atomics"},
			{"netns", "exec", ns, "nft", "add", "chain", "inet", "iwarp_atomics", "in", "{ type filter hook input priority 0 ; }"},
			{"netns", "exec", ns, "nft", "add", "rule", "inet", "iwarp_atomics", "in", "meta", "l4proto", "{", "tcp", ",", "udp", "}",
				"numgen", "random", "mod", "100", "<", fmt.Sprint(pct), "drop"},
		} {
			if out, err := exec.Command("ip", args...).CombinedOutput(); err != nil {
				return fmt.Errorf("ip %s: %v: %s", strings.Join(args, " "), err, out)
			}
		}
	}
	return nil
}

// TestUDImmediate: Send with Immediate and Write-Record with Immediate
// over UD (one datagram and, with a 1400-octet datagram size, several),
// value in the receive completion; a refused Write-Record with Immediate.
// (Loopback: no datagram is lost.)
func TestUDImmediate(t *testing.T) {
	for _, dsize := range []string{"65000", "1400"} {
		t.Run("datagram-"+dsize, func(t *testing.T) {
			o := daemontest.Options{Extra: []string{"-datagram-size", dsize}}
			da := startDaemon(t, "udimm-a", o)
			db := startDaemon(t, "udimm-b", o)
			srv := newEP(t, da, "ud-server", ofverbs.QPTypeUD, accessAll)
			cli := newEP(t, db, "ud-client", ofverbs.QPTypeUD, ofverbs.AccessLocalWrite)
			rdImmediate(t, srv, cli, []int{0, 100, 1300, 9000})
			wrecImmediate(t, srv, cli, []int{0, 100, 1300, 9000})
			wrecImmRefused(t, srv, cli, false)
		})
	}
}
