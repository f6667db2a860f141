package atomics

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"
	"unsafe"

	"github.com/iwarpd/iwarpd/ofverbs"
	"github.com/iwarpd/iwarpd/test/daemontest"
)

// TestRCFetchAddCounter: clients on both hosts (two on the target's
// daemon, two on the other) hammer one counter with FetchAdd over RC while
// the process owning it adds with CPU atomics: the final value is exactly
// the number of operations and every fetched value is unique.
func TestRCFetchAddCounter(t *testing.T) {
	da := startDaemon(t, "rc-a", daemontest.Options{})
	db := startDaemon(t, "rc-b", daemontest.Options{})
	target := newEP(t, da, "target", ofverbs.QPTypeRC, accessAll)
	if attr, err := target.ctx.QueryDevice(); err != nil || attr.AtomicCap != ofverbs.AtomicGlob {
		t.Fatalf("device atomic_cap %v (%v), want AtomicGlob", attr.AtomicCap, err)
	}
	s := newRCServer(t, target, "127.0.0.1")
	const ops, window, local = 400, 8, 400
	var clients []*ep
	for i, d := range []*daemontest.Daemon{da, da, db, db} {
		c := newEP(t, d, fmt.Sprintf("client%d", i), ofverbs.QPTypeRC, ofverbs.AccessLocalWrite)
		if _, err := s.connect(c); err != nil {
			t.Fatal(err)
		}
		clients = append(clients, c)
	}
	counter := (*uint64)(unsafe.Pointer(&target.mem[0]))
	var wg sync.WaitGroup
	results := make([][]uint64, len(clients)+1)
	errs := make([]error, len(clients))
	for i, c := range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			results[i], errs[i] = c.hammer(ops, window, target.mr.RKey(), target.addr(0), nil)
		}()
	}
	wg.Add(1)
	go func() { // the owning process's CPU atomics on the same word
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

// rdmaRead reads 8 octets at raddr into e's buffer at off and returns them.
func (e *ep) rdmaRead(id uint64, rkey uint32, raddr uint64, off int) (uint64, error) {
	if err := e.post(ofverbs.SendWR{ID: id, Opcode: ofverbs.WRRDMARead, Signaled: true, RKey: rkey, RemoteAddr: raddr,
		SGL: []ofverbs.SGE{e.mr.SGE(e.mem[off : off+8])}}); err != nil {
		return 0, err
	}
	wc, err := e.one(e.scq)
	if err == nil {
		err = wc.Err()
	}
	return e.word(off), err
}

// rdmaWrite writes v (host order) to raddr through e's buffer at off.
func (e *ep) rdmaWrite(id uint64, rkey uint32, raddr uint64, off int, v uint64) error {
	binary.NativeEndian.PutUint64(e.mem[off:], v)
	if err := e.post(ofverbs.SendWR{ID: id, Opcode: ofverbs.WRRDMAWrite, Signaled: true, RKey: rkey, RemoteAddr: raddr,
		SGL: []ofverbs.SGE{e.mr.SGE(e.mem[off : off+8])}}); err != nil {
		return err
	}
	wc, err := e.one(e.scq)
	if err == nil {
		err = wc.Err()
	}
	return err
}

// lockLoop takes the CmpSwap lock at word 0 of the target rounds times,
// and inside it increments word 8 non-atomically (RDMA Read, then Write),
// checking that the lock is still its own.
func lockLoop(e *ep, me uint64, rounds int, rkey uint32, base uint64, ah *ofverbs.AH) (int, error) {
	id := uint64(0)
	next := func() uint64 { id++; return id }
	cas := func(cmp, swap uint64) (uint64, error) {
		v, _, err := e.atomicOnce(next(), ofverbs.WRCmpSwap, rkey, base, cmp, swap, ah)
		return v, err
	}
	contended := 0
	for range rounds {
		for tries := 0; ; tries++ {
			orig, err := cas(0, me)
			if err != nil {
				return contended, err
			}
			if orig == 0 {
				break
			}
			contended++
			if tries > 100000 {
				return contended, fmt.Errorf("%s: lock held by %d for %d tries", e.name, orig, tries)
			}
		}
		v, err := e.rdmaRead(next(), rkey, base+8, 128)
		if err != nil {
			return contended, err
		}
		if err := e.rdmaWrite(next(), rkey, base+8, 136, v+1); err != nil {
			return contended, err
		}
		// Still ours: a CmpSwap that changes nothing returns the owner.
		if owner, err := cas(me, me); err != nil || owner != me {
			return contended, fmt.Errorf("%s: inside the lock the owner is %d (%v)", e.name, owner, err)
		}
		if orig, err := cas(me, 0); err != nil || orig != me {
			return contended, fmt.Errorf("%s: releasing: owner %d (%v)", e.name, orig, err)
		}
	}
	return contended, nil
}

// TestRCCmpSwapLock: clients on both hosts serialize a non-atomic
// read-modify-write of a remote word with a CmpSwap lock: no update is lost
// and the lock is never seen held by another client inside it.
func TestRCCmpSwapLock(t *testing.T) {
	da := startDaemon(t, "lock-a", daemontest.Options{})
	db := startDaemon(t, "lock-b", daemontest.Options{})
	target := newEP(t, da, "target", ofverbs.QPTypeRC, accessAll)
	s := newRCServer(t, target, "127.0.0.1")
	const rounds = 40
	var clients []*ep
	for i, d := range []*daemontest.Daemon{da, db, db} {
		c := newEP(t, d, fmt.Sprintf("locker%d", i), ofverbs.QPTypeRC, ofverbs.AccessLocalWrite)
		if _, err := s.connect(c); err != nil {
			t.Fatal(err)
		}
		clients = append(clients, c)
	}
	var wg sync.WaitGroup
	errs := make([]error, len(clients))
	var contended atomic.Int64
	for i, c := range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			n, err := lockLoop(c, uint64(i+1), rounds, target.mr.RKey(), target.addr(0), nil)
			contended.Add(int64(n))
			errs[i] = err
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
	t.Logf("%d lock attempts found it held", contended.Load())
}

// TestRCImmediate: Write with Immediate and Send with Immediate (with and
// without Solicited Event) deliver the value in the target's completion.
func TestRCImmediate(t *testing.T) {
	da := startDaemon(t, "imm-a", daemontest.Options{})
	db := startDaemon(t, "imm-b", daemontest.Options{})
	srv := newEP(t, da, "server", ofverbs.QPTypeRC, accessAll)
	s := newRCServer(t, srv, "127.0.0.1")
	cli := newEP(t, db, "client", ofverbs.QPTypeRC, ofverbs.AccessLocalWrite)
	sqp, err := s.connect(cli)
	if err != nil {
		t.Fatal(err)
	}
	for i := range 6 { // one for the Write's Immediate Data, two per Send with Immediate
		if n, err := sqp.PostRecv([]ofverbs.RecvWR{{ID: uint64(100 + i), SGL: []ofverbs.SGE{srv.mr.SGE(srv.mem[4096*(i+1) : 4096*(i+2)])}}}); n != 1 {
			t.Fatal(err)
		}
	}
	for i := range 256 {
		cli.mem[i] = byte(i * 7)
	}
	// Write with Immediate: the data at the target, then one receive
	// completion WCRecvRDMAWithImm carrying the value.
	if err := cli.post(ofverbs.SendWR{ID: 1, Opcode: ofverbs.WRWriteWithImm, Signaled: true, Imm: 0xdeadbeef,
		RKey: srv.mr.RKey(), RemoteAddr: srv.addr(40000), SGL: []ofverbs.SGE{cli.mr.SGE(cli.mem[:200])}}); err != nil {
		t.Fatal(err)
	}
	if wc, err := cli.one(cli.scq); err != nil || wc.Err() != nil || wc.Opcode != ofverbs.WCRDMAWrite || wc.ByteLen != 200 {
		t.Fatalf("write-with-imm completion %+v %v", wc, err)
	}
	wc, err := srv.one(srv.rcq)
	if err != nil || wc.Err() != nil || wc.Opcode != ofverbs.WCRecvRDMAWithImm || wc.Flags&ofverbs.WCFlagImm == 0 || wc.Imm != 0xdeadbeef || wc.ID != 100 {
		t.Fatalf("target completion %+v (%v)", wc, err)
	}
	if !bytes.Equal(srv.mem[40000:40200], cli.mem[:200]) {
		t.Fatal("written data differs")
	}
	// Send with Immediate (and with Solicited Event): the Send's receive
	// completes with the data, the Immediate Data's with the value.
	for i, solicited := range []bool{false, true} {
		imm := uint32(7 + i)
		if err := cli.post(ofverbs.SendWR{ID: uint64(2 + i), Opcode: ofverbs.WRSendWithImm, Signaled: true, Imm: imm,
			Solicited: solicited, SGL: []ofverbs.SGE{cli.mr.SGE(cli.mem[:64])}}); err != nil {
			t.Fatal(err)
		}
		if wc, err := cli.one(cli.scq); err != nil || wc.Err() != nil || wc.Opcode != ofverbs.WCSend {
			t.Fatalf("send-with-imm completion %+v %v", wc, err)
		}
		data, err := srv.one(srv.rcq)
		if err != nil || data.Err() != nil || data.Opcode != ofverbs.WCRecv || data.ByteLen != 64 || data.Flags&ofverbs.WCFlagImm != 0 {
			t.Fatalf("send data completion %+v (%v)", data, err)
		}
		off := 4096 * int(data.ID-99)
		if !bytes.Equal(srv.mem[off:off+64], cli.mem[:64]) {
			t.Fatal("sent data differs")
		}
		immWC, err := srv.one(srv.rcq)
		if err != nil || immWC.Err() != nil || immWC.Opcode != ofverbs.WCRecv || immWC.Flags&ofverbs.WCFlagImm == 0 ||
			immWC.Imm != imm || immWC.ByteLen != 0 || immWC.Solicited() != solicited {
			t.Fatalf("immediate completion %+v (%v), want imm %d solicited %v", immWC, err, imm, solicited)
		}
	}
}

// TestRCAtomicViolations: every access violation of an Atomic Request is
// answered with the RFC's Terminate (the requester's work request
// completes with a remote access error naming it) and nothing is modified.
func TestRCAtomicViolations(t *testing.T) {
	da := startDaemon(t, "viol-a", daemontest.Options{})
	db := startDaemon(t, "viol-b", daemontest.Options{})
	target := newEP(t, da, "target", ofverbs.QPTypeRC, accessAll)
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
	for i := range buf.Bytes() {
		buf.Bytes()[i] = byte(3 * i)
	}
	before := bytes.Clone(target.mem)
	beforeNA := bytes.Clone(buf.Bytes())
	s := newRCServer(t, target, "127.0.0.1")
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
		t.Run(c.name, func(t *testing.T) {
			cli := newEP(t, db, fmt.Sprintf("violator%d", i), ofverbs.QPTypeRC, ofverbs.AccessLocalWrite)
			if _, err := s.connect(cli); err != nil {
				t.Fatal(err)
			}
			_, wc, err := cli.atomicOnce(1, c.op, c.rkey, c.raddr, 5, 6, nil)
			if err == nil || wc.Status != ofverbs.WCRemAccessErr || wc.Flags&ofverbs.WCFlagTermValid == 0 || wc.Term != c.term {
				t.Fatalf("completion %+v (%v), want remote access error with Terminate %#x", wc, err, c.term)
			}
		})
	}
	if !bytes.Equal(target.mem, before) || !bytes.Equal(buf.Bytes(), beforeNA) {
		t.Fatal("a refused atomic modified the target's memory")
	}
}
