package e2e

import (
	"fmt"
	"runtime"
	"testing"
	"time"

	"github.com/iwarpd/iwarpd/proto"
	"github.com/iwarpd/iwarpd/verbsd/config"
	"github.com/iwarpd/iwarpd/verbsd/verbsdtest"
)

// Zero allocations per message in steady state: one
// message at a time, post receive → post send → engine → socket → engine
// → both completions, for UD, RD and RC Send, through the real engine of
// an in-process daemon and real loopback sockets. testing.AllocsPerRun
// counts every allocation of the process (the engine goroutine's
// included) over many messages, after a warm-up that lets the engine's
// lazily grown state (maps, per-peer state, buffers) reach its size.

const (
	allocWarmup = 200
	allocRuns   = 300
)

// pingOnce is one message: it returns an error instead of failing the
// test, so that nothing in the measured function allocates on success.
type pingOnce func(i int) error

// awaitCQE polls cq (never allocating) until one completion arrived, and
// checks it.
func awaitCQE(cq *verbsdtest.CQ, out []proto.CQE, deadline time.Time, wrid uint64, what string) error {
	for cq.PollInto(out[:1]) == 0 {
		if time.Now().After(deadline) {
			return errAllocTimeout
		}
		runtime.Gosched()
	}
	if out[0].Status != proto.WCSuccess || out[0].WRID != wrid {
		return fmt.Errorf("%s completion %+v, want success of wr %d", what, out[0], wrid)
	}
	return nil
}

var errAllocTimeout = fmt.Errorf("no completion in time")

// checkZeroAllocs warms up with ping, then measures it.
func checkZeroAllocs(t *testing.T, ping pingOnce) {
	t.Helper()
	for i := range allocWarmup {
		if err := ping(i); err != nil {
			t.Fatalf("warm-up message %d: %v", i, err)
		}
	}
	var err error
	i := allocWarmup
	allocs := testing.AllocsPerRun(allocRuns, func() {
		if e := ping(i); e != nil && err == nil {
			err = e
		}
		i++
	})
	if err != nil {
		t.Fatalf("message %d: %v", i, err)
	}
	if allocs != 0 {
		t.Errorf("%.2f allocations per message in steady state, want 0", allocs)
	}
}

// allocConfig makes the engine sleep as soon as it is idle: AllocsPerRun
// runs with GOMAXPROCS 1, where a polling engine holds the only P until
// its poll window ends.
func allocConfig(c *config.Config) { c.PollWindow = 0 }

// allocSizes are the message sizes measured: one datagram (one TCP
// segment), and a message of many (UD and RD: 45 datagrams of 1472 octets
// by default, reassembled; RC: FPDUs of loopback's MSS).
var allocSizes = []int{64, 65536}

func TestZeroAllocsUDSend(t *testing.T) {
	for _, size := range allocSizes {
		t.Run(fmt.Sprint(size), func(t *testing.T) {
			_, path := startRD(t, allocConfig)
			a, b := newFastNode(t, path, 1<<16), newFastNode(t, path, 1<<16)
			ah, err := a.c.CreateAH(a.pd, b.qp.Addr)
			if err != nil {
				t.Fatal(err)
			}
			checkZeroAllocs(t, udPing(a, b, ah, size))
		})
	}
}

func udPing(a, b *fastNode, ah proto.AddressVector, size int) pingOnce {
	out := make([]proto.CQE, 1)
	return func(i int) error {
		deadline := time.Now().Add(roundWait)
		if err := b.c.PostRecv(b.qp.RQ, uint64(i), []proto.SGE{b.mr.SGE(0, size)}); err != nil {
			return err
		}
		e := proto.SQE{WRID: uint64(i), Opcode: proto.WRSend, Flags: proto.SendSignaled, AH: ah}
		if err := a.qp.PostSend(e, []proto.SGE{a.mr.SGE(0, size)}, nil); err != nil {
			return err
		}
		if err := awaitCQE(a.scq, out, deadline, uint64(i), "send"); err != nil {
			return err
		}
		return awaitCQE(b.rcq, out, deadline, uint64(i), "receive")
	}
}

func TestZeroAllocsRDSend(t *testing.T) {
	for _, size := range allocSizes {
		t.Run(fmt.Sprint(size), func(t *testing.T) { rdAllocs(t, size) })
	}
}

func rdAllocs(t *testing.T, size int) {
	_, path := startRD(t, allocConfig)
	a, b := newRDNode(t, path, 1<<16, 0), newRDNode(t, path, 1<<16, 0)
	ah := a.ah(t, b)
	out := make([]proto.CQE, 1)
	checkZeroAllocs(t, func(i int) error {
		deadline := time.Now().Add(roundWait)
		if err := b.c.PostRecv(b.qp.RQ, uint64(i), []proto.SGE{b.mr.SGE(0, size)}); err != nil {
			return err
		}
		e := proto.SQE{WRID: uint64(i), Opcode: proto.WRSend, Flags: proto.SendSignaled, AH: ah}
		if err := a.qp.PostSend(e, []proto.SGE{a.mr.SGE(0, size)}, nil); err != nil {
			return err
		}
		if err := awaitCQE(b.rcq, out, deadline, uint64(i), "receive"); err != nil {
			return err
		}
		return awaitCQE(a.scq, out, deadline, uint64(i), "send") // RD: completes when acknowledged
	})
}

func TestZeroAllocsRCSend(t *testing.T) {
	for _, size := range allocSizes {
		t.Run(fmt.Sprint(size), func(t *testing.T) { rcAllocs(t, size) })
	}
}

func rcAllocs(t *testing.T, size int) {
	srv, path := rcServer(t, allocConfig)
	a := newRCEnd(t, srv, path, rcOpts{bufSize: 1 << 16})
	b := newRCEnd(t, srv, path, rcOpts{bufSize: 1 << 16})
	pi, pr := rcParams(true, false, 16, 16)
	connectRC(t, a, b, pi, pr, 0)
	out := make([]proto.CQE, 1)
	checkZeroAllocs(t, func(i int) error {
		deadline := time.Now().Add(roundWait)
		if err := b.c.PostRecv(b.rq, uint64(i), []proto.SGE{b.mr.SGE(0, size)}); err != nil {
			return err
		}
		if err := a.trySend(proto.SQE{WRID: uint64(i), Opcode: proto.WRSend, Flags: proto.SendSignaled}, []proto.SGE{a.mr.SGE(0, size)}, nil); err != nil {
			return err
		}
		if err := awaitCQE(a.scq, out, deadline, uint64(i), "send"); err != nil {
			return err
		}
		return awaitCQE(b.rcq, out, deadline, uint64(i), "receive")
	})
}

// roundWait bounds each message's round (10 s, scaled); computed once (scaled parses the
// environment, and a failed parse allocates: with no
// IWARPD_TEST_TIMEOUT_SCALE every message counted one allocation).
var roundWait = scaled(10 * time.Second)
