package main

import (
	"encoding/binary"
	"fmt"
	"time"
)

// RDMA Write bandwidth over -qps N RC queue pairs (-t rc -o write -m bw):
// writeBWSender/writeBWReceiver of rdma.go, spread round-robin over the
// QPs as bwSender is (multiqp.go). Iteration k goes to QP (k/c) mod N; on
// its QP it is the j-th Write, into the server's ring slot j mod share of
// that QP's region; every share/2 Writes of a QP, and after its last, the
// client Sends that QP a marker (its count of Writes), on which the server
// checks the slots written since and credits them. A Write post never
// straddles a marker, so markers fall at the same counts on both sides and
// the server, replaying the client's schedule, knows which QP's marker
// comes next.

// globalIter is the iteration of the j-th message of QP q.
func globalIter(q int, j uint64, chunk, qps int) uint64 {
	c := uint64(chunk)
	return ((j/c)*uint64(qps)+uint64(q))*c + j%c
}

// writeStep is one post of the Write schedule: k Writes on QP q starting
// at the QP's j-th; marker says a marker follows.
type writeStep struct {
	q      int
	j, k   uint64
	marker bool
}

// writeSchedule replays the posts of a multi-QP Write run: chunks of the
// round-robin, cut at marker counts (every `every` Writes of a QP, and its
// last).
func writeSchedule(iters, chunk, qps int, every uint64, yield func(writeStep) error) error {
	totals := perQPTotals(iters, chunk, qps)
	sent := make([]uint64, qps)
	c := uint64(chunk)
	for next := uint64(0); next < uint64(iters); {
		q := qpOf(next, chunk, qps)
		k := min(c-next%c, uint64(iters)-next, every-sent[q]%every)
		st := writeStep{q: q, j: sent[q], k: k}
		sent[q] += k
		next += k
		st.marker = sent[q]%every == 0 || sent[q] == totals[q]
		if err := yield(st); err != nil {
			return err
		}
	}
	return nil
}

// writeBWSender posts the schedule's Writes, waiting for a QP's credit
// when its share of the window is full, then for every QP's last credit.
func (m *multiQP) writeBWSender(size, iters, window, batch int) (sideResult, error) {
	var r sideResult
	n := len(m.qps)
	wq, chunk := uint64(qpWindow(window, n)), qpChunk(window, n, batch)
	every := uint64(creditEvery(int(wq)))
	totals := perQPTotals(iters, chunk, n)
	sent, credited := make([]uint64, n), make([]uint64, n)
	marks := make([]mark, 0, iters/int(every)+n+2)
	var allCredited uint64
	start := time.Now()
	marks = append(marks, mark{start, 0})
	takeCredit := func(q int) error {
		c, err := m.qps[q].recvCredit()
		if err != nil {
			return fmt.Errorf("QP %d: waiting for credit (%d of %d Writes acknowledged): %w", q+1, credited[q], totals[q], err)
		}
		if c > sent[q] {
			return fmt.Errorf("QP %d: server acknowledged %d Writes, only %d were sent", q+1, c, sent[q])
		}
		if c > credited[q] {
			allCredited += c - credited[q]
			credited[q] = c
			marks = append(marks, mark{time.Now(), allCredited})
		}
		return nil
	}
	err := writeSchedule(iters, chunk, n, every, func(st writeStep) error {
		t := m.qps[st.q]
		for sent[st.q]+st.k > credited[st.q]+wq {
			if err := takeCredit(st.q); err != nil {
				return err
			}
		}
		for i := range st.k {
			j := st.j + i
			if err := t.setWrite(int(i), globalIter(st.q, j, chunk, n), size, int(j%wq)); err != nil {
				return err
			}
		}
		if err := t.post(t.swr[:st.k]); err != nil {
			return fmt.Errorf("QP %d: RDMA Writes %d..%d: %w", st.q+1, st.j, st.j+st.k-1, err)
		}
		sent[st.q] += st.k
		if st.marker {
			if err := t.sendCredit(sent[st.q]); err != nil {
				return fmt.Errorf("QP %d: sending the marker after %d Writes: %w", st.q+1, sent[st.q], err)
			}
		}
		return nil
	})
	if err != nil {
		return r, err
	}
	for q := range m.qps {
		for credited[q] < totals[q] {
			if err := takeCredit(q); err != nil {
				return r, err
			}
		}
	}
	r.elapsed = marks[len(marks)-1].at.Sub(start)
	r.peak = peakRate(marks, peakSpan(window, iters), size)
	return r, nil
}

// writeBWReceiver replays the schedule: at each marker it takes exactly
// that marker from its QP, checks the slots written since the QP's
// previous one against their iterations, and credits them.
func (m *multiQP) writeBWReceiver(p pattern, size, iters, window, batch int) (sideResult, error) {
	var r sideResult
	n := len(m.qps)
	wq, chunk := uint64(qpWindow(window, n)), qpChunk(window, n, batch)
	every := uint64(creditEvery(int(wq)))
	done := make([]uint64, n)
	err := writeSchedule(iters, chunk, n, every, func(st writeStep) error {
		if !st.marker {
			return nil
		}
		t := m.qps[st.q]
		want := st.j + st.k
		c, err := t.recvOneCredit()
		if err != nil {
			return fmt.Errorf("QP %d: waiting for the marker after %d Writes: %w", st.q+1, want, err)
		}
		if c != want {
			return fmt.Errorf("QP %d: marker %d, want %d", st.q+1, c, want)
		}
		for j := done[st.q]; j < c; j++ {
			r.check(p, t.regionSlot(int(j % wq))[:size], globalIter(st.q, j, chunk, n), size)
		}
		done[st.q] = c
		if err := t.sendCredit(c); err != nil {
			return fmt.Errorf("QP %d: sending credit %d: %w", st.q+1, c, err)
		}
		return nil
	})
	return r, err
}

// recvOneCredit waits for one credit or marker message and returns its
// count (recvCredit, by contrast, takes every one already arrived).
func (t *verbsTransport) recvOneCredit() (uint64, error) {
	b, err := t.nextRecv()
	if err != nil {
		return 0, err
	}
	if len(b) != len(t.cbuf) {
		return 0, t.errorf("credit message of %d bytes, want %d", len(b), len(t.cbuf))
	}
	c := binary.LittleEndian.Uint64(b)
	return c, t.release()
}

// localBuffers are the RDMA regions of the QPs, in QP order (the hello's
// buffers).
func (m *multiQP) localBuffers() []*remoteBuffer {
	var bufs []*remoteBuffer
	for _, t := range m.qps {
		if b := t.localBuffer(); b != nil {
			bufs = append(bufs, b)
		}
	}
	return bufs
}

// setPeerBuffers gives QP i the peer's region i.
func (m *multiQP) setPeerBuffers(bufs []*remoteBuffer) error {
	if len(bufs) == 0 {
		return nil
	}
	if len(bufs) != len(m.qps) {
		return fmt.Errorf("the peer announced %d RDMA regions, want one per QP (%d)", len(bufs), len(m.qps))
	}
	for i, t := range m.qps {
		t.setPeerBuffer(bufs[i])
	}
	return nil
}
