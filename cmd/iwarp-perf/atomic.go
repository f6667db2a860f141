package main

import (
	"encoding/binary"
	"fmt"
	"hash/crc32"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/iwarpd/iwarpd/ofverbs"
)

// RFC 7306 tests (docs/iwarp-perf.md, docs/atomics.md):
//
//   - -o fetchadd / cmpswap (-t rc, rd): the client's atomics on word 0 of
//     the server's region (the server is passive: its daemon executes
//     them). FetchAdd adds 1, CmpSwap swaps k for k+1; on one QP they run
//     in order, so atomic k must return k: every result is checked.
//   - -o send-fetchadd (-t rc, rd, ud; lat): the baseline of make bench —
//     the same fetch-add done by the server process: the client Sends k,
//     the server adds 1 to a counter with a CPU atomic and Sends back the
//     value it fetched, which must be k.
//   - -o write-imm (-t rc; lat): perftest's write ping-pong, but each side
//     waits for the Immediate Data's receive completion (WCRecvRDMAWithImm,
//     value k) instead of polling the last octet. On UD and RD (lat, bw)
//     it is -o write-record with Write-Records with Immediate (wrec.go),
//     each value checked as send-imm's.
//   - -o send-imm (-t ud, rd, rc): the send tests with Send with Immediate;
//     the value is a CRC of the message head, checked by the receiver.

// atomicOp reports whether op is a remote atomic test.
func atomicOp(op string) bool { return op == "fetchadd" || op == "cmpswap" }

// atomicSize is the operand and result size of every atomic.
const atomicSize = 8

// immOf is the immediate value a send-imm message of msg carries.
func immOf(msg []byte) uint32 {
	return crc32.ChecksumIEEE(msg[:min(len(msg), 64)]) ^ uint32(len(msg))
}

// setAtomic makes wr i the atomic of iteration iter on the peer's word 0,
// its result into local region slot slot.
func (t *verbsTransport) setAtomic(i int, iter uint64, slot int) error {
	raddr, err := t.peerRange(0, atomicSize)
	if err != nil {
		return err
	}
	off := slot * atomicSize
	t.sges[i] = t.regionMR.SGE(t.region[off : off+atomicSize])
	wr := &t.swr[i]
	wr.ID, wr.Inline, wr.InlineData = iter, false, nil
	wr.SGL = t.sges[i : i+1]
	wr.RemoteAddr, wr.RKey, wr.AH = raddr, t.peerBuf.RKey, t.ah
	if t.op == "fetchadd" {
		wr.Opcode, wr.CompareAdd, wr.Swap = ofverbs.WRFetchAdd, 1, 0
	} else {
		wr.Opcode, wr.CompareAdd, wr.Swap = ofverbs.WRCmpSwap, iter, iter+1
	}
	return nil
}

// atomicResult checks the result of atomic iter in slot slot: iter.
func (t *verbsTransport) atomicResult(r *sideResult, iter uint64, slot int) {
	got := atomic.LoadUint64((*uint64)(unsafe.Pointer(&t.region[slot*atomicSize])))
	if got != iter {
		r.mismatches++
		if r.firstError == "" {
			r.firstError = fmt.Sprintf("%s %d fetched %d, want %d", t.op, iter, got, iter)
		}
		return
	}
	r.verified++
}

// atomicLat times atomics one at a time.
func (t *verbsTransport) atomicLat(iters int) (sideResult, error) {
	r := sideResult{rtt: make([]time.Duration, iters)}
	for i := range iters {
		iter := uint64(i)
		if err := t.setAtomic(0, iter, 0); err != nil {
			return r, err
		}
		t0 := time.Now()
		if err := t.postAll(t.swr[:1]); err != nil {
			return r, err
		}
		wcs, err := t.waitSendCompletions()
		if err != nil {
			return r, fmt.Errorf("waiting for %s %d: %w", t.op, iter, err)
		}
		r.rtt[i] = time.Since(t0)
		if len(wcs) != 1 || wcs[0].ID != iter || wcs[0].Err() != nil {
			return r, fmt.Errorf("%s %d: completion %+v (%v)", t.op, iter, wcs[0], wcs[0].Err())
		}
		t.atomicResult(&r, iter, 0)
	}
	return r, nil
}

// atomicRate keeps min(window, ORD) atomics outstanding, result k in slot
// k mod depth, and checks every result (completions come in order).
func (t *verbsTransport) atomicRate(iters, window int) (sideResult, error) {
	var r sideResult
	depth := uint64(min(window, t.ord, t.sqDepth, t.regionSlots))
	total := uint64(iters)
	var posted, done uint64
	start := time.Now()
	for done < total {
		if posted < total && posted-done < depth {
			n := min(depth-(posted-done), total-posted, uint64(len(t.swr)))
			for i := range n {
				if err := t.setAtomic(int(i), posted+i, int((posted+i)%depth)); err != nil {
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
			return r, fmt.Errorf("waiting for %s %d of %d: %w", t.op, done+1, total, err)
		}
		for _, wc := range wcs {
			if wc.Err() != nil || wc.ID != done {
				return r, fmt.Errorf("%s completion %+v (%v), want iteration %d", t.op, wc, wc.Err(), done)
			}
			t.atomicResult(&r, done, int(done%depth))
			done++
		}
	}
	r.elapsed = time.Since(start)
	return r, nil
}

// sendFetchAddClient times the Send/Recv emulation of FetchAdd: Send k,
// receive the value the server fetched.
func (t *verbsTransport) sendFetchAddClient(iters int) (sideResult, error) {
	r := sideResult{rtt: make([]time.Duration, iters)}
	for i := range iters {
		iter := uint64(i)
		t0 := time.Now()
		if err := t.sendWord(iter); err != nil {
			return r, err
		}
		b, err := t.recv(atomicSize)
		if err != nil {
			return r, fmt.Errorf("waiting for fetch-add reply %d: %w", iter, err)
		}
		r.rtt[i] = time.Since(t0)
		got := uint64(0)
		if len(b) == atomicSize {
			got = binary.LittleEndian.Uint64(b)
		}
		if err := t.release(); err != nil {
			return r, err
		}
		if got != iter || len(b) != atomicSize {
			r.mismatches++
			if r.firstError == "" {
				r.firstError = fmt.Sprintf("send-fetchadd %d: reply %d (%d octets)", iter, got, len(b))
			}
			continue
		}
		r.verified++
	}
	return r, nil
}

// sendFetchAddServer answers each request with a fetch-add on a local
// counter (a CPU atomic, as a server thread doing it for remote clients).
func (t *verbsTransport) sendFetchAddServer(iters int) (sideResult, error) {
	var r sideResult
	var counter atomic.Uint64
	for range iters {
		if _, err := t.recv(atomicSize); err != nil {
			return r, err
		}
		if err := t.release(); err != nil {
			return r, err
		}
		if err := t.sendWord(counter.Add(1) - 1); err != nil {
			return r, err
		}
	}
	return r, nil
}

// sendWord Sends the 8 octets of v (inline).
func (t *verbsTransport) sendWord(v uint64) error {
	binary.LittleEndian.PutUint64(t.cbuf[:], v)
	wr := &t.swr[0]
	wr.ID, wr.Opcode, wr.Inline, wr.InlineData, wr.SGL = v, ofverbs.WRSend, true, t.cbuf[:], nil
	return t.post(t.swr[:1])
}

// writeImmLat is writeLat with the Immediate Data's receive completion as
// the signal of arrival (the value is the iteration).
func (t *verbsTransport) writeImmLat(p pattern, size, iters int, client bool) (sideResult, error) {
	var r sideResult
	if client {
		r.rtt = make([]time.Duration, iters)
	}
	for i := range iters {
		iter, slot := uint64(i), i%2
		var t0 time.Time
		if client {
			t0 = time.Now()
			if err := t.writeImm(iter, size, slot); err != nil {
				return r, err
			}
		}
		if _, err := t.nextRecv(); err != nil {
			return r, fmt.Errorf("waiting for %s: %w", describeRC("Write with Immediate", iter, size), err)
		}
		wc := t.heldWC
		if err := t.release(); err != nil {
			return r, err
		}
		if wc.Opcode != ofverbs.WCRecvRDMAWithImm || wc.Flags&ofverbs.WCFlagImm == 0 || wc.Imm != uint32(iter) {
			return r, fmt.Errorf("%s: completion %v imm %d (flags %#x), want recv-rdma-with-imm %d",
				describeRC("Write with Immediate", iter, size), wc.Opcode, wc.Imm, wc.Flags, uint32(iter))
		}
		if client {
			r.rtt[i] = time.Since(t0)
		} else if err := t.writeImm(iter, size, slot); err != nil {
			return r, err
		}
		r.check(p, t.regionSlot(slot)[:size], iter, size)
	}
	return r, nil
}

func (t *verbsTransport) writeImm(iter uint64, size, slot int) error {
	if err := t.setWrite(0, iter, size, slot); err != nil {
		return err
	}
	t.swr[0].Opcode, t.swr[0].Imm = ofverbs.WRWriteWithImm, uint32(iter)
	if err := t.post(t.swr[:1]); err != nil {
		return fmt.Errorf("%s: %w", describeRC("Write with Immediate", iter, size), err)
	}
	return nil
}

// checkImm checks the immediate data of a send-imm message b (or a
// datagram write-imm's, whose record completion is the held slot's; both
// carry immOf(b)) in the held slot's completion; on RC the Immediate Data is its own message after
// the Send, with its own receive completion (RFC 7306), consumed here.
func (t *verbsTransport) checkImm(b []byte) error {
	wc := t.heldWC
	if t.kind == "rc" {
		if wc.Flags&ofverbs.WCFlagImm != 0 {
			return t.errorf("%s: the Send's completion carries immediate data", t.op)
		}
		if ok, err := t.pollRecv(); !ok || err != nil {
			if err == nil {
				err = t.w.wait(t.pollRecv, func(d time.Duration) error { return t.block(t.recvCQ, t.pollRecv, d) })
			}
			if err != nil {
				return fmt.Errorf("waiting for the Immediate Data: %w", err)
			}
		}
		wc = t.rwcs[t.rpos]
		t.rpos++
		if err := wc.Err(); err != nil {
			return t.errorf("Immediate Data receive: %w", err)
		}
		if err := t.postSlot(int(wc.ID)); err != nil {
			return err
		}
	}
	if wc.Flags&ofverbs.WCFlagImm == 0 || wc.Imm != immOf(b) {
		return t.errorf("%s: immediate %#x (flags %#x), want %#x", t.op, wc.Imm, wc.Flags, immOf(b))
	}
	return nil
}
