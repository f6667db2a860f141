package main

import (
	"errors"
	"fmt"
	"net/netip"
	"strings"
	"time"
)

// Many queue pairs between the two processes (-qps N): the multi-connection
// method of the thesis (seed digest §3 B3; issue 6). N QPs are set up
// between the one client process and the one server process, in one session
// with each daemon, and one thread per side drives them round-robin:
//
//   - lat: every round sends one message on each QP in turn (QP 0 .. N-1),
//     so that all N are outstanding at once, then takes the N replies in
//     the same order; the server answers each QP in turn. The reported
//     latency is the thesis' normalized latency: the round's time ÷ N,
//     halved (one way per message). -n counts messages: n/N rounds.
//   - -qp-port P (ud, rd) puts QP i on UDP port P+i.
//   - bw: the -window is split across the QPs (window/N each, at least 1)
//     and the -n messages go round-robin in chunks: iteration k on QP
//     (k/c) mod N, c = min(batch, window/N/2) consecutive iterations per
//     chunk; each QP has its own credits, so the sender stalls only on a
//     QP whose share is full. The bandwidth is the aggregate: all bytes ÷
//     the time to the last credit of every QP.
//
// Every message is verified as in the one-QP tests (iteration k carries
// k's pattern; in lat the message of round r on QP q is iteration r·N+q).

// maxQPs is the most queue pairs -qps takes.
const maxQPs = 64

// qpWindow is one QP's share of the window.
func qpWindow(window, qps int) int { return max(window/max(qps, 1), 1) }

// qpChunk is how many consecutive iterations go to one QP before the next:
// at most half the QP's window, so that a stalled sender always has a
// credit coming (the receiver credits every half window).
func qpChunk(window, qps, batch int) int {
	return max(1, min(batch, qpWindow(window, qps)/2))
}

// validateQPs checks -qps against the test: the multi-QP loops move Sends,
// and RC RDMA Writes in bw (multiqp_write.go).
func (c *config) validateQPs() error {
	if c.qps < 1 || c.qps > maxQPs {
		return usagef("-qps %d: want 1..%d", c.qps, maxQPs)
	}
	if c.qps == 1 {
		return nil
	}
	writeBW := c.op == "write" && c.qpType == "rc" && c.test == "bw"
	if c.raw != "" || (c.op != "send" && !writeBW) {
		return usagef("-qps %d: needs -o send over iwarpd (-t ud, rd or rc), or -t rc -o write -m bw", c.qps)
	}
	if c.qpPort != 0 && c.qpPort+c.qps-1 > 65535 {
		return usagef("-qp-port %d: QP i takes port %d+i, past 65535 with -qps %d", c.qpPort, c.qpPort, c.qps)
	}
	if c.iters < c.qps {
		return usagef("-n %d: want at least one message per QP (-qps %d)", c.iters, c.qps)
	}
	if c.test == "lat" && c.iters%c.qps != 0 {
		return usagef("-n %d: lat with -qps %d runs rounds of one message per QP: want a multiple of %d", c.iters, c.qps, c.qps)
	}
	return nil
}

// multiQP is the transport of -qps N: N verbs QPs in one session.
type multiQP struct {
	qps []*verbsTransport
}

// newMultiQP creates cfg.qps QPs in session sh, each with its share of
// the window.
func newMultiQP(cfg *config, sh *verbsShared, ip netip.Addr, server bool) (*multiQP, error) {
	sub := *cfg
	sub.window = qpWindow(cfg.window, cfg.qps)
	m := &multiQP{}
	for i := range cfg.qps {
		t, err := newVerbsQP(&sub, sh, ip, server, i)
		if err != nil {
			return nil, fmt.Errorf("QP %d of %d: %w", i+1, cfg.qps, err)
		}
		m.qps = append(m.qps, t)
	}
	m.qps[0].ownsCtx = true // closing the first ends the session of all
	return m, nil
}

func (m *multiQP) name() string { return m.qps[0].name() }

// localAddr joins the QPs' addresses with commas, in QP order.
func (m *multiQP) localAddr() string {
	addrs := make([]string, len(m.qps))
	for i, t := range m.qps {
		addrs[i] = t.localAddr()
	}
	return strings.Join(addrs, ",")
}

// connect connects QP i to the peer's QP i (RC: in order, the client
// connecting while the server accepts).
func (m *multiQP) connect(peer string, server bool) error {
	addrs := strings.Split(peer, ",")
	if len(addrs) != len(m.qps) {
		return fmt.Errorf("the peer announced %d QP addresses, want %d", len(addrs), len(m.qps))
	}
	for i, t := range m.qps {
		if err := t.connect(addrs[i], server); err != nil {
			return fmt.Errorf("QP %d of %d: %w", i+1, len(m.qps), err)
		}
	}
	return nil
}

func (m *multiQP) prepare(size int) error {
	for i, t := range m.qps {
		if err := t.prepare(size); err != nil {
			return fmt.Errorf("QP %d of %d: %w", i+1, len(m.qps), err)
		}
	}
	return nil
}

// The one-stream methods make no sense across N QPs: the loops below
// drive each QP itself.
var errMultiStream = errors.New("internal error: -qps N is driven per QP")

func (m *multiQP) send(uint64, int, int) error { return errMultiStream }
func (m *multiQP) recv(int) ([]byte, error)    { return nil, errMultiStream }
func (m *multiQP) release() error              { return errMultiStream }
func (m *multiQP) sendCredit(uint64) error     { return errMultiStream }
func (m *multiQP) recvCredit() (uint64, error) { return 0, errMultiStream }

func (m *multiQP) close() error {
	var errs []error
	for i := len(m.qps) - 1; i >= 0; i-- { // the session (QP 0's) last
		errs = append(errs, m.qps[i].close())
	}
	return errors.Join(errs...)
}

// runClientTest runs one size on the client: the multi-QP loops for -qps N,
// else the one-QP tests (rdma.go).
func runClientTest(cfg *config, tr transport, p pattern, size int) (sideResult, error) {
	m, ok := tr.(*multiQP)
	if !ok {
		return runClientSide(cfg, tr, p, size)
	}
	switch {
	case cfg.test == "lat":
		return m.latClient(p, size, cfg.iters)
	case cfg.op == "write":
		return m.writeBWSender(size, cfg.iters, cfg.window, cfg.batch())
	}
	return m.bwSender(size, cfg.iters, cfg.window, cfg.batch())
}

// runServerTest is runClientTest's counterpart on the server.
func runServerTest(cfg *config, tr transport, p pattern, size int) (sideResult, error) {
	m, ok := tr.(*multiQP)
	if !ok {
		return runServerSide(cfg, tr, p, size)
	}
	switch {
	case cfg.test == "lat":
		return m.latServer(p, size, cfg.iters)
	case cfg.op == "write":
		return m.writeBWReceiver(p, size, cfg.iters, cfg.window, cfg.batch())
	}
	return m.bwReceiver(p, size, cfg.iters, cfg.window, cfg.batch())
}

// latClient runs iters/N rounds; a round sends on every QP, then takes
// every reply, and its time ÷ N is one sample (computeLat halves it). The
// replies are verified after the round's time is taken.
func (m *multiQP) latClient(p pattern, size, iters int) (sideResult, error) {
	n := len(m.qps)
	rounds := iters / n
	r := sideResult{rtt: make([]time.Duration, rounds)}
	got := make([][]byte, n)
	for i := range rounds {
		base := uint64(i) * uint64(n)
		t0 := time.Now()
		for q, t := range m.qps {
			if err := t.send(base+uint64(q), 1, size); err != nil {
				return r, fmt.Errorf("QP %d: sending iteration %d: %w", q+1, base+uint64(q), err)
			}
		}
		for q, t := range m.qps {
			b, err := t.recv(size)
			if err != nil {
				return r, fmt.Errorf("QP %d: waiting for the reply to iteration %d: %w", q+1, base+uint64(q), err)
			}
			got[q] = b
		}
		r.rtt[i] = time.Since(t0) / time.Duration(n)
		for q, t := range m.qps {
			r.check(p, got[q], base+uint64(q), size)
			if err := t.release(); err != nil {
				return r, err
			}
		}
	}
	return r, nil
}

// latServer answers each QP in turn with the pattern of the same
// iteration, verifying each ping after replying.
func (m *multiQP) latServer(p pattern, size, iters int) (sideResult, error) {
	var r sideResult
	n := len(m.qps)
	for i := range iters / n {
		for q, t := range m.qps {
			iter := uint64(i)*uint64(n) + uint64(q)
			got, err := t.recv(size)
			if err != nil {
				return r, fmt.Errorf("QP %d: waiting for iteration %d: %w", q+1, iter, err)
			}
			if err := t.send(iter, 1, size); err != nil {
				return r, fmt.Errorf("QP %d: replying to iteration %d: %w", q+1, iter, err)
			}
			r.check(p, got, iter, size)
			if err := t.release(); err != nil {
				return r, err
			}
		}
	}
	return r, nil
}

// qpOf is the QP that carries iteration k, chunk c at a time round-robin.
func qpOf(k uint64, chunk, qps int) int { return int(k / uint64(chunk) % uint64(qps)) }

// perQPTotals counts the messages each QP carries in a run of iters.
func perQPTotals(iters, chunk, qps int) []uint64 {
	t := make([]uint64, qps)
	for k := range uint64(iters) {
		t[qpOf(k, chunk, qps)]++
	}
	return t
}

// bwSender streams iters messages round-robin over the QPs, each QP at
// most its window share ahead of its own last credit. When the QP of the
// next chunk is full it waits for that QP's credit (the receiver takes the
// messages in the same order, so that credit is coming: see qpChunk).
func (m *multiQP) bwSender(size, iters, window, batch int) (sideResult, error) {
	var r sideResult
	n := len(m.qps)
	wq, chunk := uint64(qpWindow(window, n)), qpChunk(window, n, batch)
	totals := perQPTotals(iters, chunk, n)
	sent, credited := make([]uint64, n), make([]uint64, n)
	marks := make([]mark, 0, iters/creditEvery(int(wq))+n+2)
	total := uint64(iters)
	var next, allCredited uint64 // next iteration to send; credits summed over the QPs
	start := time.Now()
	marks = append(marks, mark{start, 0})
	takeCredit := func(q int) error {
		c, err := m.qps[q].recvCredit()
		if err != nil {
			return fmt.Errorf("QP %d: waiting for credit (%d of %d messages acknowledged): %w", q+1, credited[q], totals[q], err)
		}
		if c > sent[q] {
			return fmt.Errorf("QP %d: receiver acknowledged %d messages, only %d were sent", q+1, c, sent[q])
		}
		if c > credited[q] {
			allCredited += c - credited[q]
			credited[q] = c
			marks = append(marks, mark{time.Now(), allCredited})
		}
		return nil
	}
	for next < total {
		q := qpOf(next, chunk, n)
		k := min(uint64(chunk)-next%uint64(chunk), total-next)
		if sent[q]+k > credited[q]+wq {
			if err := takeCredit(q); err != nil {
				return r, err
			}
			continue
		}
		if err := m.qps[q].send(next, int(k), size); err != nil {
			return r, fmt.Errorf("QP %d: sending iterations %d..%d: %w", q+1, next, next+k-1, err)
		}
		sent[q] += k
		next += k
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

// bwReceiver takes the messages in the sender's order, verifies each, and
// credits each QP every half of its window share and after its last.
func (m *multiQP) bwReceiver(p pattern, size, iters, window, batch int) (sideResult, error) {
	var r sideResult
	n := len(m.qps)
	every := uint64(creditEvery(qpWindow(window, n)))
	chunk := qpChunk(window, n, batch)
	totals := perQPTotals(iters, chunk, n)
	got := make([]uint64, n)
	for k := range uint64(iters) {
		q := qpOf(k, chunk, n)
		t := m.qps[q]
		b, err := t.recv(size)
		if err != nil {
			return r, fmt.Errorf("QP %d: waiting for message %d of %d: %w", q+1, k+1, iters, err)
		}
		r.check(p, b, k, size)
		if err := t.release(); err != nil {
			return r, err
		}
		got[q]++
		if got[q]%every == 0 || got[q] == totals[q] {
			if err := t.sendCredit(got[q]); err != nil {
				return r, fmt.Errorf("QP %d: sending credit %d: %w", q+1, got[q], err)
			}
		}
	}
	return r, nil
}
