package main

import (
	"fmt"
	"slices"
	"time"
)

// transport moves whole messages between the two sides of one test. Data
// messages carry the pattern of an iteration; credit messages (bw) carry a
// cumulative count of received data messages, from receiver to sender.
type transport interface {
	// name is what the report calls the transport ("ud", "raw-udp"...).
	name() string
	// localAddr is the data address to announce to the peer ("" if none).
	localAddr() string
	// connect aims the transport at the peer's announced data address.
	connect(peer string, server bool) error
	// prepare readies the transport for messages of size octets (posts
	// receives); called on both sides before the size's barrier.
	prepare(size int) error
	// send sends the n data messages of iterations first..first+n-1.
	send(first uint64, n, size int) error
	// recv waits for the next data message and returns its payload, valid
	// until release.
	recv(size int) ([]byte, error)
	// release gives back the buffer recv returned.
	release() error
	// sendCredit and recvCredit carry the receiver's progress back.
	sendCredit(count uint64) error
	recvCredit() (uint64, error)
	close() error
}

// sideResult is what one side learned while running one size.
type sideResult struct {
	verified   int64
	mismatches int64
	firstError string
	rtt        []time.Duration // lat client
	elapsed    time.Duration   // bw sender
	peak       float64         // bw sender: best bytes/s over a window of messages
}

func (r *sideResult) check(p pattern, got []byte, iter uint64, size int) {
	if err := p.verify(got, iter, size); err != nil {
		r.mismatches++
		if r.firstError == "" {
			r.firstError = err.Error()
		}
		return
	}
	r.verified++
}

// latClient runs iters ping-pongs and times each round trip; it verifies
// each reply outside the timed part.
func latClient(tr transport, p pattern, size, iters int) (sideResult, error) {
	r := sideResult{rtt: make([]time.Duration, iters)}
	for i := range iters {
		iter := uint64(i)
		t0 := time.Now()
		if err := tr.send(iter, 1, size); err != nil {
			return r, fmt.Errorf("sending iteration %d: %w", i, err)
		}
		got, err := tr.recv(size)
		if err != nil {
			return r, fmt.Errorf("waiting for the reply to iteration %d: %w", i, err)
		}
		r.rtt[i] = time.Since(t0)
		r.check(p, got, iter, size)
		if err := tr.release(); err != nil {
			return r, err
		}
	}
	return r, nil
}

// latServer answers every ping with the pattern of the same iteration,
// verifying the ping after replying.
func latServer(tr transport, p pattern, size, iters int) (sideResult, error) {
	var r sideResult
	for i := range iters {
		iter := uint64(i)
		got, err := tr.recv(size)
		if err != nil {
			return r, fmt.Errorf("waiting for iteration %d: %w", i, err)
		}
		if err := tr.send(iter, 1, size); err != nil {
			return r, fmt.Errorf("replying to iteration %d: %w", i, err)
		}
		r.check(p, got, iter, size)
		if err := tr.release(); err != nil {
			return r, err
		}
	}
	return r, nil
}

// creditEvery is how many received messages one credit message reports.
func creditEvery(window int) int { return max(window/2, 1) }

// bwSender streams iters messages, never more than window ahead of the
// receiver's last credit, in batches of at most batch.
func bwSender(tr transport, size, iters, window, batch int) (sideResult, error) {
	var r sideResult
	marks := make([]mark, 0, iters/creditEvery(window)+2)
	total := uint64(iters)
	var sent, credited uint64
	start := time.Now()
	marks = append(marks, mark{start, 0})
	for credited < total {
		avail := credited + uint64(window) - sent
		if sent < total && avail > 0 {
			n := min(avail, total-sent, uint64(batch))
			if err := tr.send(sent, int(n), size); err != nil {
				return r, fmt.Errorf("sending iterations %d..%d: %w", sent, sent+n-1, err)
			}
			sent += n
			continue
		}
		c, err := tr.recvCredit()
		if err != nil {
			return r, fmt.Errorf("waiting for credit (%d of %d messages acknowledged): %w", credited, total, err)
		}
		if c > sent {
			return r, fmt.Errorf("receiver acknowledged %d messages, only %d were sent", c, sent)
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

// mark is when the sender learned that count messages had arrived.
type mark struct {
	at    time.Time
	count uint64
}

// peakSpan is the fewest messages a span must cover to count for the peak
// rate: credits read back to back after a busy stretch would otherwise give
// absurd rates over tiny spans.
func peakSpan(window, iters int) uint64 { return uint64(max(4*window, iters/20)) }

// peakRate is the best bytes/s over spans of at least span messages.
func peakRate(marks []mark, span uint64, size int) float64 {
	var peak float64
	for i, j := 0, 1; j < len(marks); j++ {
		for i+1 < j && marks[j].count-marks[i+1].count >= span {
			i++
		}
		if marks[j].count-marks[i].count < span {
			continue
		}
		if d := marks[j].at.Sub(marks[i].at); d > 0 {
			peak = max(peak, float64(marks[j].count-marks[i].count)*float64(size)/d.Seconds())
		}
	}
	return peak
}

// bwReceiver receives and verifies iters messages, crediting the sender
// every window/2 messages and after the last one.
func bwReceiver(tr transport, p pattern, size, iters, window int) (sideResult, error) {
	var r sideResult
	every := creditEvery(window)
	for i := range iters {
		got, err := tr.recv(size)
		if err != nil {
			return r, fmt.Errorf("waiting for message %d of %d: %w", i+1, iters, err)
		}
		r.check(p, got, uint64(i), size)
		if err := tr.release(); err != nil {
			return r, err
		}
		if (i+1)%every == 0 || i+1 == iters {
			if err := tr.sendCredit(uint64(i + 1)); err != nil {
				return r, fmt.Errorf("sending credit %d: %w", i+1, err)
			}
		}
	}
	return r, nil
}

// latStats are one-way latencies (half the round trip) in microseconds.
type latStats struct {
	MinUS    float64 `json:"min_us"`
	MedianUS float64 `json:"median_us"`
	AvgUS    float64 `json:"avg_us"`
	P99US    float64 `json:"p99_us"`
	MaxUS    float64 `json:"max_us"`
}

func computeLat(rtt []time.Duration) latStats {
	if len(rtt) == 0 {
		return latStats{}
	}
	s := slices.Clone(rtt)
	slices.Sort(s)
	us := func(d time.Duration) float64 { return float64(d) / 2 / float64(time.Microsecond) }
	var sum time.Duration
	for _, d := range s {
		sum += d
	}
	p99 := (len(s)*99 + 99) / 100 // nearest rank
	return latStats{
		MinUS:    us(s[0]),
		MedianUS: us(s[(len(s)-1)/2]),
		AvgUS:    us(sum / time.Duration(len(s))),
		P99US:    us(s[min(p99, len(s))-1]),
		MaxUS:    us(s[len(s)-1]),
	}
}

// bwStats are the sender's bandwidth figures.
type bwStats struct {
	PeakGbps    float64 `json:"peak_gbps"`
	AvgGbps     float64 `json:"avg_gbps"`
	AvgMBps     float64 `json:"avg_mbps"` // megabytes (10^6 octets) per second
	MsgRateMpps float64 `json:"msg_rate_mpps"`
	Seconds     float64 `json:"seconds"`
}

func computeBW(size, iters int, elapsed time.Duration, peak float64) bwStats {
	sec := elapsed.Seconds()
	if sec <= 0 {
		return bwStats{}
	}
	bytesPerSec := float64(size) * float64(iters) / sec
	return bwStats{
		PeakGbps:    max(peak, bytesPerSec) * 8 / 1e9,
		AvgGbps:     bytesPerSec * 8 / 1e9,
		AvgMBps:     bytesPerSec / 1e6,
		MsgRateMpps: float64(iters) / sec / 1e6,
		Seconds:     sec,
	}
}
