package rd

import (
	"net/netip"
	"time"

	"github.com/iwarpd/iwarpd/llp/rd"
	"github.com/iwarpd/iwarpd/verbsd/rnic"
)

// logDead logs, at info and once per event, each peer the RD state
// machine gave up on in one Poll: its Failed actions (llp/rd abandon: a
// datagram reached the retransmission limit unacknowledged) come together,
// one per outstanding datagram, so they are counted per peer. Never per
// datagram; the lines go through the device's EventLog limiter since a
// client can aim at any number of unreachable peers (docs/iwarpd.md
// "Logging").
func logDead(q *QP, acts []rd.Action) {
	var peers []netip.AddrPort
	var counts []int
	for i := range acts {
		if acts[i].Kind != rd.Failed {
			continue
		}
		j := 0
		for j < len(peers) && peers[j] != acts[i].Peer {
			j++
		}
		if j == len(peers) {
			peers, counts = append(peers, acts[i].Peer), append(counts, 0)
		}
		counts[j]++
	}
	if len(peers) == 0 {
		return
	}
	dev := q.Session.Dev
	for j, p := range peers {
		ok, n := dev.EventLog.Allow(time.Now())
		if !ok {
			continue
		}
		dev.Log.Infof("session %d (pid %d): RD QP %d (QPN %d): peer %v declared dead: a datagram reached the "+
			"retransmission limit unacknowledged; %d outstanding datagram(s) given up, their work requests complete "+
			"with WCRetryExcErr%s%s", q.Session.ID, q.Session.Cred.Pid, q.Handle, q.QPN, p, counts[j], crcHint(q),
			rnic.Note(n))
	}
}
