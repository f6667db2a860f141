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
