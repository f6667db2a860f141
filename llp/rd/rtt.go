package rd

// RTT estimation and retransmission timeout per RFC 6298 §2, per peer, in
// nanoseconds. Samples come only from datagrams never retransmitted (Karn,
// RFC 6298 §3); the timeout of a datagram backs off exponentially with its
// retransmission count (RFC 6298 §5.5), capped at MaxRTO.

// rttSample folds the measurement r (> 0) into p's SRTT and RTTVAR.
func (p *peer) rttSample(r int64) {
	if r <= 0 {
		r = 1
	}
	if p.minRTT == 0 || r < p.minRTT {
		p.minRTT = r
	}
	if p.srtt == 0 {
		p.srtt = r
		p.rttvar = r / 2
		return
	}
	d := p.srtt - r
	if d < 0 {
		d = -d
	}
	p.rttvar = (3*p.rttvar + d) / 4 // β = 1/4
	p.srtt = (7*p.srtt + r) / 8     // α = 1/8
}

// rto returns p's retransmission timeout before backoff:
// SRTT + max(G, 4·RTTVAR) clamped to [MinRTO, MaxRTO], or InitialRTO
// before the first sample.
func (e *Endpoint) rto(p *peer) int64 {
	if p.srtt == 0 {
		return min(max(int64(e.cfg.InitialRTO), int64(e.cfg.MinRTO)), int64(e.cfg.MaxRTO))
	}
	const granularity = 1000 // 1µs clock granularity G
	r := p.srtt + max(granularity, 4*p.rttvar)
	return min(max(r, int64(e.cfg.MinRTO)), int64(e.cfg.MaxRTO))
}

// backedOff returns the timeout of a datagram that timed out retries
// times: RTO·2^retries, capped at MaxRTO.
func (e *Endpoint) backedOff(p *peer, retries uint8) int64 {
	r := e.rto(p)
	maxRTO := int64(e.cfg.MaxRTO)
	for i := uint8(0); i < retries && r < maxRTO; i++ {
		r *= 2
	}
	return min(r, maxRTO)
}

// maxProbes is how many tail probes in a row a peer gets without any
// progress before its oldest datagram falls back to the retransmission
// timeout with backoff (RFC 6298 §5.5). At 20 % packet loss each way a
// 4 KiB datagram (three fragments) and its ACK both get through with
// probability 0.41: eight probes in a row fail with probability 0.015.
const maxProbes = 8

// progress records that p's peer acknowledged or SACKed something new:
// the path delivers, tail probes may go out again.
func (p *peer) progress() {
	p.progressed = true
	p.probes = 0
}

// probing reports whether the oldest datagram towards p is resent after a
// probe timeout (pto) instead of the backed-off RTO: the peer has
// acknowledged or SACKed in this space, and fewer than maxProbes probes
// went out since it last did. This is RFC 8985's tail loss probe applied
// to the hole itself: when the window cannot move (every later datagram
// SACKed, or the application waits for the oldest to complete) no ACK
// will come to show that a retransmission was lost, and the RTO — at
// least MinRTO, 20 round trips on a veth, doubled on each loss — held the
// whole window: at 20 % loss, 50 % of the datagrams lost, that stalled
// the stream for 2, 6, 14, 30 … ms at a time (issue 18: 6.9 MB/s in
// simulation, 1.7–6.4 MB/s on veth, against 140 MB/s at 10 %). A probe
// is not a timeout: it does not back the timer off, does not count
// against MaxRetries and does not inflate the RTO, since the path was
// seen delivering. A dead peer stops acknowledging: after maxProbes the
// RFC 6298 timeouts take over, backed off and counted as before.
func (e *Endpoint) probing(p *peer) bool {
	return p.progressed && p.probes < maxProbes && p.srtt > 0
}

// pto returns the probe timeout of datagram s towards p (RFC 8985 §7.2):
// two SRTT after its latest transmission, plus the receiver's ACK delay
// for a first transmission (a retransmission asks for an immediate ACK),
// never more than the RTO.
func (e *Endpoint) pto(p *peer, s *outSeg) int64 {
	d := 2 * p.srtt
	if s.flags&segRetx == 0 {
		d += int64(e.cfg.AckDelay)
	}
	const granularity = 1000
	return max(min(d, e.rto(p)), granularity)
}
