package rnic

import (
	"fmt"
	"net/netip"
	"time"

	"github.com/iwarpd/iwarpd/iwerr"
	"github.com/iwarpd/iwarpd/proto"
	"github.com/iwarpd/iwarpd/rdmap"
)

// Remote access refusals on datagram QPs. A datagram QP
// serves any peer that holds its Q_Key, with no connection to tear down, so
// a peer may try STag after STag. Every refused remote access (Write-Record
// placement, RD Read source) is
//
//   - counted on the QP: remote_access_refused, and remote_invalid_stag
//     when the STag names no memory region of the QP's session at all (or
//     an invalidated one);
//   - reported to the owner of the memory, the QP's session, as the
//     asynchronous event EventRemoteAccessRefused (rate-limited per QP; its
//     detail names the last source, STag, fault and how many refusals it
//     stands for);
//   - answered with ONE generic error on the wire, RDMAP Remote Protection
//     Error "unspecified" (Layer 0, EType 1, ECode 0xFF, RFC 5040 §7.2),
//     whatever the fault: a remote cannot tell an invalid STag from a
//     bounds or rights violation, so a guess that hit a real STag with a
//     wrong offset does not tell the guesser it found one. RC QPs keep the
//     RFC 5040 §7.4.1 distinctions in their Terminate (siw interop), and a
//     wrong guess there costs the guesser its connection;
//   - on UD, answered at most errReplyBurst times per source and then
//     errReplyRate times a second (per QP, per source address; sources
//     beyond errReplyPeers share one bucket), the rest counted as
//     error_msgs_limited. RD error messages are sequenced and acknowledged
//     (the requester's work request waits for them), so they are never
//     dropped; the RD window paces them and MaxErrorMessages bounds them.

// DgramAccessError is the one error a datagram QP answers a refused remote
// access with.
var DgramAccessError = iwerr.RDMAPProtectionUnspecified

// Limits of error replies and owner reports.
const (
	errReplyBurst = 8
	errReplyRate  = 8    // per second, per source
	errReplyPeers = 1024 // sources with their own bucket, per QP
	reportBurst   = 4
	reportRate    = 1 // owner events per second, per QP
)

// tokenBucket is a rate limiter driven by the caller's clock.
type tokenBucket struct {
	tokens float64
	last   time.Time
}

// take reports whether an action may happen at now, at most burst at once
// and rate per second on average.
func (b *tokenBucket) take(now time.Time, rate, burst float64) bool {
	if b.last.IsZero() {
		b.tokens = burst
	} else if d := now.Sub(b.last).Seconds(); d > 0 {
		b.tokens = min(burst, b.tokens+d*rate)
	}
	b.last = now
	if b.tokens >= 1 {
		b.tokens--
		return true
	}
	return false
}

// accessGuard is a datagram QP's state for refused remote accesses.
type accessGuard struct {
	replies    map[netip.AddrPort]*tokenBucket
	overflow   tokenBucket // sources beyond errReplyPeers
	report     tokenBucket
	unreported int64 // refusals since the last event
}

// RemoteAccess resolves a remote access from src to q's memory (STag, TO,
// length, right) as LookupRemote does; a refusal is counted and reported to
// q's owner (rate-limited).
func (e *Engine) RemoteAccess(q *QP, src netip.AddrPort, stag uint32, to, n uint64, need proto.Access, now time.Time) ([]byte, rdmap.AccessFault) {
	b, fault := q.LookupRemote(stag, to, n, need)
	if fault == 0 {
		return b, 0
	}
	e.refused(q, src, stag, to, n, fault, now)
	return nil, fault
}

// RemoteCheck is RemoteAccess's checks without the octets (CheckRemote: a
// source in process memory is probed, not read): for an RDMA Read
// Request, whose Responses read their source a window at a time. Reading
// the whole source here as well read every octet of a process-memory Read
// twice.
// It returns the region (nil on a fault).
func (e *Engine) RemoteCheck(q *QP, src netip.AddrPort, stag uint32, to, n uint64, need proto.Access, now time.Time) (*MR, rdmap.AccessFault) {
	m, _, fault := q.CheckRemote(stag, to, n, need)
	if fault != 0 {
		e.refused(q, src, stag, to, n, fault, now)
	}
	return m, fault
}

// refused counts a refused remote access and reports it to q's owner
// (rate-limited).
func (e *Engine) refused(q *QP, src netip.AddrPort, stag uint32, to, n uint64, fault rdmap.AccessFault, now time.Time) {
	e.Count(q, cRemoteAccessRefused, 1)
	if fault == rdmap.FaultInvalidStag {
		e.Count(q, cRemoteInvalidStag, 1)
	}
	g := &q.guard
	g.unreported++
	if g.report.take(now, reportRate, reportBurst) {
		q.Session.SendEvent(e, proto.Event{Type: proto.EventRemoteAccessRefused, Handle: q.Handle,
			Detail: fmt.Sprintf("remote access refused: %v from %v (STag %#08x, TO %#x, %d octets); %d refusal(s) since the last report",
				fault, src, stag, to, n, g.unreported)})
		g.unreported = 0
	}
}

// ErrorReplyAllowed reports whether q may answer src with an error message
// now (UD; see above), counting the refusal otherwise.
func (e *Engine) ErrorReplyAllowed(q *QP, src netip.AddrPort, now time.Time) bool {
	g := &q.guard
	b := g.replies[src]
	if b == nil {
		if g.replies == nil {
			g.replies = map[netip.AddrPort]*tokenBucket{}
		}
		if len(g.replies) < errReplyPeers {
			b = &tokenBucket{}
			g.replies[src] = b
		} else {
			b = &g.overflow
		}
	}
	if b.take(now, errReplyRate, errReplyBurst) {
		return true
	}
	e.Count(q, cErrorMsgsLimited, 1)
	return false
}
