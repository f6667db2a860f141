package main

import (
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/iwarpd/iwarpd/ofverbs"
	"golang.org/x/sys/unix"
)

// The RDMA Write and Read tests of RC queue pairs (docs/iwarp-perf.md).

// A Write's arrival signals no descriptor: polled memory is looked at with
// sched_yield between looks for memPollYield beyond the poll window (Go's
// timers cannot nap for tens of µs: a 50 µs sleep took about 1 ms here),
// then with naps of memPollSleep.
const (
	memPollYield = 10 * time.Millisecond
	memPollSleep = 50 * time.Microsecond
)

// runClientSide runs one size of the test on the client.
func runClientSide(cfg *config, tr transport, p pattern, size int) (sideResult, error) {
	if cfg.op == "send-fetchadd" { // atomic.go
		return tr.(*verbsTransport).sendFetchAddClient(cfg.iters)
	}
	if cfg.op == "send" || wrecTest(cfg.op, cfg.qpType) || cfg.op == "send-imm" { // wrec.go, atomic.go
		if cfg.test == "lat" {
			return latClient(tr, p, size, cfg.iters)
		}
		return bwSender(tr, size, cfg.iters, cfg.window, cfg.batch())
	}
	t, err := rdmaVerbs(cfg, tr)
	if err != nil {
		return sideResult{}, err
	}
	switch cfg.op + " " + cfg.test {
	case "fetchadd lat", "cmpswap lat":
		return t.atomicLat(cfg.iters)
	case "fetchadd bw", "cmpswap bw":
		return t.atomicRate(cfg.iters, cfg.window)
	case "write-imm lat":
		return t.writeImmLat(p, size, cfg.iters, true)
	case "write lat":
		return t.writeLat(p, size, cfg.iters, true)
	case "write bw":
		return t.writeBWSender(size, cfg.iters, cfg.window, cfg.batch())
	case "read lat":
		return t.readLat(p, size, cfg.iters)
	default:
		return t.readBW(p, size, cfg.iters, cfg.window, cfg.batch())
	}
}

// runServerSide runs one size of the test on the server. The server of a
// Read test is passive: its daemon answers the Reads.
func runServerSide(cfg *config, tr transport, p pattern, size int) (sideResult, error) {
	if cfg.op == "send-fetchadd" {
		return tr.(*verbsTransport).sendFetchAddServer(cfg.iters)
	}
	if cfg.op == "send" || wrecTest(cfg.op, cfg.qpType) || cfg.op == "send-imm" {
		if cfg.test == "lat" {
			return latServer(tr, p, size, cfg.iters)
		}
		return bwReceiver(tr, p, size, cfg.iters, cfg.window)
	}
	t, err := rdmaVerbs(cfg, tr)
	if err != nil {
		return sideResult{}, err
	}
	switch cfg.op + " " + cfg.test {
	case "write-imm lat":
		return t.writeImmLat(p, size, cfg.iters, false)
	case "write lat":
		return t.writeLat(p, size, cfg.iters, false)
	case "write bw":
		return t.writeBWReceiver(p, size, cfg.iters, cfg.window)
	}
	return sideResult{}, nil
}

// rdmaVerbs returns tr as the verbs transport of an RDMA Write (RC) or
// Read (RC, RD) test.
func rdmaVerbs(cfg *config, tr transport) (*verbsTransport, error) {
	t, ok := tr.(*verbsTransport)
	if !ok || (t.kind != "rc" && !(t.kind == "rd" && (cfg.op == "read" || atomicOp(cfg.op)))) {
		return nil, fmt.Errorf("-o %s: not an operation of -t %s", cfg.op, cfg.transportName())
	}
	return t, nil
}

// setWrite makes wr an RDMA Write of iteration iter's message into peer
// slot slot.
func (t *verbsTransport) setWrite(i int, iter uint64, size, slot int) error {
	raddr, err := t.peerRange(slot*t.stride, size)
	if err != nil {
		return err
	}
	t.sges[i] = t.patMR.SGE(t.pat.message(iter, size))
	wr := &t.swr[i]
	wr.ID, wr.Opcode, wr.Inline, wr.InlineData = iter, ofverbs.WRRDMAWrite, false, nil
	wr.SGL = t.sges[i : i+1]
	wr.RemoteAddr, wr.RKey = raddr, t.peerBuf.RKey
	return nil
}

// writeLat is perftest's write-latency ping-pong: the client RDMA-Writes
// iteration k into the server's slot k mod 2, the server polls the last
// octet of that slot for k's value (the last octet is placed last), writes
// k back into the client's slot k mod 2, and the client polls likewise. Each
// side checks the whole message once its last octet arrived (outside the
// timed part on the client; after replying on the server). Two slots keep
// the peer's next Write off the message being checked.
func (t *verbsTransport) writeLat(p pattern, size, iters int, client bool) (sideResult, error) {
	var r sideResult
	if client {
		r.rtt = make([]time.Duration, iters)
	}
	for i := range iters {
		iter, slot := uint64(i), i%2
		var t0 time.Time
		if client {
			t0 = time.Now()
			if err := t.write(iter, size, slot); err != nil {
				return r, err
			}
		}
		if err := t.waitLastOctet(p, slot, iter, size); err != nil {
			return r, fmt.Errorf("waiting for %s: %w", describeRC("Write", iter, size), err)
		}
		if client {
			r.rtt[i] = time.Since(t0)
		} else if err := t.write(iter, size, slot); err != nil {
			return r, err
		}
		r.check(p, t.regionSlot(slot)[:size], iter, size)
	}
	return r, nil
}

func (t *verbsTransport) write(iter uint64, size, slot int) error {
	if err := t.setWrite(0, iter, size, slot); err != nil {
		return err
	}
	if err := t.post(t.swr[:1]); err != nil {
		return fmt.Errorf("%s: %w", describeRC("Write", iter, size), err)
	}
	return nil
}

// waitLastOctet polls the last octet of region slot slot for the value it
// has in iteration iter's message, reaping send completions meanwhile (a
// failed Write is an error at once, not a timeout).
func (t *verbsTransport) waitLastOctet(p pattern, slot int, iter uint64, size int) error {
	b := t.regionSlot(slot)
	want := p.message(iter, size)[size-1]
	try := func() (bool, error) {
		if loadByte(b, size-1) == want {
			return true, nil
		}
		_, err := t.reapSends()
		return false, err
	}
	w := t.w
	w.pollWindow += memPollYield
	return w.wait(try, func(d time.Duration) error {
		time.Sleep(min(d, memPollSleep))
		return nil
	})
}

// writeBWSender streams iters RDMA Writes into the server's ring of window
// slots (iteration k into slot k mod window), at most window ahead of the
// server's last credit, in batches of at most batch. After every
// window/2 Writes, and the last, it Sends a marker (the cumulative count):
// RDMAP delivers the Send only after the Writes before it are placed, so the
// server checks those slots, then credits them back for reuse. The time
// runs from the first Write to the last credit, as bwSender's.
func (t *verbsTransport) writeBWSender(size, iters, window, batch int) (sideResult, error) {
	var r sideResult
	every := uint64(creditEvery(window))
	marks := make([]mark, 0, iters/int(every)+2)
	total := uint64(iters)
	var sent, credited uint64
	start := time.Now()
	marks = append(marks, mark{start, 0})
	for credited < total {
		if sent < total && sent-credited < uint64(window) {
			n := min(credited+uint64(window)-sent, total-sent, uint64(batch), every-sent%every)
			for i := range n {
				iter := sent + i
				if err := t.setWrite(int(i), iter, size, int(iter%uint64(window))); err != nil {
					return r, err
				}
			}
			if err := t.post(t.swr[:n]); err != nil {
				return r, fmt.Errorf("RDMA Writes of iterations %d..%d: %w", sent, sent+n-1, err)
			}
			sent += n
			if sent%every == 0 || sent == total {
				if err := t.sendCredit(sent); err != nil {
					return r, fmt.Errorf("sending the marker after %d Writes: %w", sent, err)
				}
			}
			continue
		}
		c, err := t.recvCredit()
		if err != nil {
			return r, fmt.Errorf("waiting for credit (%d of %d Writes acknowledged): %w", credited, total, err)
		}
		if c > sent {
			return r, fmt.Errorf("server acknowledged %d Writes, only %d were sent", c, sent)
		}
		if c > credited {
			credited = c
			marks = append(marks, mark{time.Now(), c})
		}
	}
	r.elapsed = marks[len(marks)-1].at.Sub(start)
	r.peak = peakRate(marks, peakSpan(window, iters), size)
	return r, nil
}

// writeBWReceiver takes the client's markers, checks every slot written
// since the previous one and credits them back.
func (t *verbsTransport) writeBWReceiver(p pattern, size, iters, window int) (sideResult, error) {
	var r sideResult
	total := uint64(iters)
	var done uint64
	for done < total {
		c, err := t.recvCredit()
		if err != nil {
			return r, fmt.Errorf("waiting for a marker (%d of %d Writes checked): %w", done, total, err)
		}
		if c > total || c < done {
			return r, fmt.Errorf("marker %d after %d Writes of %d", c, done, total)
		}
		if os.Getenv("PERFDBG") != "" {
			var firsts []byte
			for i := range window {
				firsts = append(firsts, t.regionSlot(i)[0])
			}
			fmt.Fprintf(os.Stderr, "marker %d: slot first bytes %v\n", c, firsts)
		}
		for k := done; k < c; k++ {
			r.check(p, t.regionSlot(int(k % uint64(window)))[:size], k, size)
		}
		done = c
		if err := t.sendCredit(c); err != nil {
			return r, fmt.Errorf("sending credit %d: %w", c, err)
		}
	}
	return r, nil
}

// setRead makes wr an RDMA Read of iteration iter's message — the peer's
// pattern buffer from the iteration's offset — into local region slot slot.
func (t *verbsTransport) setRead(i int, iter uint64, size, slot int) error {
	raddr, err := t.peerRange(patternOffset(iter), size)
	if err != nil {
		return err
	}
	t.sges[i] = t.regionMR.SGE(t.regionSlot(slot)[:size])
	wr := &t.swr[i]
	wr.ID, wr.Opcode, wr.Inline, wr.InlineData = iter, ofverbs.WRRDMARead, false, nil
	wr.SGL = t.sges[i : i+1]
	wr.RemoteAddr, wr.RKey = raddr, t.peerBuf.RKey
	return nil
}

// postAll posts wrs, yielding while the send queue is full. Callers keep
// at most sqDepth signaled work requests outstanding themselves.
func (t *verbsTransport) postAll(wrs []ofverbs.SendWR) error {
	for len(wrs) > 0 {
		k, err := t.qp.PostSend(wrs)
		wrs = wrs[k:]
		if err != nil && !errors.Is(err, unix.ENOMEM) {
			return t.errorf("post send: %w", err)
		}
		if err != nil {
			schedYield()
		}
	}
	return nil
}

// waitSendCompletions waits until the send CQ yields completions and
// returns them (valid until the next poll).
func (t *verbsTransport) waitSendCompletions() ([]ofverbs.WC, error) {
	var n int
	try := latched(func() (int, error) {
		var err error
		n, err = t.sendCQ.Poll(t.swcs[:])
		if err != nil {
			return 0, t.errorf("poll send CQ: %w", err)
		}
		return n, nil
	})
	if err := t.w.wait(try, func(d time.Duration) error { return t.block(t.sendCQ, try, d) }); err != nil {
		return nil, err
	}
	return t.swcs[:n], nil
}

// latched turns poll, which consumes what it returns (a CQ poll), into a
// try for waiter.wait that may be called again after it succeeded: block
// re-checks with try after arming the CQ, then wait calls try once more.
// Once a poll found something, try reports done without polling again;
// a plain try would poll again there and drop what the first poll found
// (a lost completion: a Read "timed out", or seen "out of order").
func latched(poll func() (int, error)) func() (bool, error) {
	found := false
	return func() (bool, error) {
		if found {
			return true, nil
		}
		n, err := poll()
		found = n > 0 && err == nil
		return found, err
	}
}

// readLat times RDMA Reads one at a time: iteration k reads the peer's
// message of k into slot k mod 2; the completion means the data is placed.
// Each message is checked after its time was taken.
func (t *verbsTransport) readLat(p pattern, size, iters int) (sideResult, error) {
	r := sideResult{rtt: make([]time.Duration, iters)}
	for i := range iters {
		iter, slot := uint64(i), i%2
		if err := t.setRead(0, iter, size, slot); err != nil {
			return r, err
		}
		t0 := time.Now()
		if err := t.postAll(t.swr[:1]); err != nil {
			return r, err
		}
		wcs, err := t.waitSendCompletions()
		if err != nil {
			return r, fmt.Errorf("waiting for %s: %w", describeRC("Read", iter, size), err)
		}
		r.rtt[i] = time.Since(t0)
		if len(wcs) != 1 || wcs[0].ID != iter {
			return r, fmt.Errorf("%s: %d completions, first for %d", describeRC("Read", iter, size), len(wcs), wcs[0].ID)
		}
		if err := wcs[0].Err(); err != nil {
			return r, fmt.Errorf("%s: %w", describeRC("Read", iter, size), err)
		}
		r.check(p, t.regionSlot(slot)[:size], iter, size)
	}
	return r, nil
}

// readBW keeps min(window, ORD in force) RDMA Reads outstanding, iteration
// k into slot k mod that depth, and checks each message as its completion
// arrives. A slot is reused only once every earlier Read completed too
// (completions are expected in order; one out of order is tolerated and
// counted in outOfOrder). The time runs from the first post to the last
// completion; the peak is taken over marks every depth/2 completions.
func (t *verbsTransport) readBW(p pattern, size, iters, window, batch int) (sideResult, error) {
	var r sideResult
	depth := uint64(min(window, t.ord, t.sqDepth, t.regionSlots))
	every := uint64(creditEvery(int(depth)))
	total := uint64(iters)
	marks := make([]mark, 0, iters/int(every)+2)
	completed := make([]bool, depth) // by slot, for Reads in [done, posted)
	var posted, done uint64
	start := time.Now()
	marks = append(marks, mark{start, 0})
	for done < total {
		if posted < total && posted-done < depth {
			n := min(depth-(posted-done), total-posted, uint64(batch))
			for i := range n {
				iter := posted + i
				if err := t.setRead(int(i), iter, size, int(iter%depth)); err != nil {
					return r, err
				}
			}
			if err := t.postAll(t.swr[:n]); err != nil {
				return r, err
			}
			posted += n
			continue
		}
		wcs, err := t.waitSendCompletions()
		if err != nil {
			return r, fmt.Errorf("waiting for Read %d of %d: %w", done+1, total, err)
		}
		for _, wc := range wcs {
			if err := wc.Err(); err != nil {
				return r, fmt.Errorf("%s: %w", describeRC("Read", wc.ID, size), err)
			}
			if wc.ID < done || wc.ID >= posted || completed[wc.ID%depth] {
				return r, fmt.Errorf("completion of Read iteration %d: not outstanding (%d..%d are)", wc.ID, done, posted-1)
			}
			if wc.ID != done {
				t.outOfOrder++
			}
			r.check(p, t.regionSlot(int(wc.ID % depth))[:size], wc.ID, size)
			completed[wc.ID%depth] = true
			for done < posted && completed[done%depth] {
				completed[done%depth] = false
				done++
				if done%every == 0 || done == total {
					marks = append(marks, mark{time.Now(), done})
				}
			}
		}
	}
	r.elapsed = marks[len(marks)-1].at.Sub(start)
	r.peak = peakRate(marks, peakSpan(int(depth), iters), size)
	if t.outOfOrder > 0 {
		fmt.Fprintf(os.Stderr, "iwarp-perf: warning: %d RDMA Read completions out of order (%d bytes)\n", t.outOfOrder, size)
		t.outOfOrder = 0
	}
	return r, nil
}

// describeRC names one RDMA operation in errors.
func describeRC(op string, iter uint64, size int) string {
	return fmt.Sprintf("RDMA %s of iteration %d (%d octets)", op, iter, size)
}
