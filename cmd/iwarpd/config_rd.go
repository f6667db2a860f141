package main

import (
	"fmt"
	"strconv"
	"time"

	vcfg "github.com/iwarpd/iwarpd/verbsd/config"
)

// rdFlags are the -rd-* flags (docs/rd.md), as given.
type rdFlags struct {
	window, retries, maxMsg, ird, ord                    *string
	reorderQP, reorderAll, replyRate, replyBurst         *string
	rtoMin, rtoMax, rtoInitial, ackDelay, idle, notReady *string
	linger                                               *string
}

// addRDFlags registers the -rd-* flags with defaults from def.
func addRDFlags(str func(name, value, usage string) *string, def vcfg.RDConfig) rdFlags {
	l := def.Link
	return rdFlags{
		window:     str("rd-window", strconv.Itoa(l.Window), "RD: unacknowledged datagrams per peer (send window, receive window advertised)"),
		retries:    str("rd-max-retries", strconv.Itoa(l.MaxRetries), "RD: retransmission timeouts of one datagram before its work request fails (retry exceeded); fast retransmissions and tail probes do not count"),
		rtoMin:     str("rd-rto-min", l.MinRTO.String(), "RD: smallest retransmission timeout (`duration`)"),
		rtoMax:     str("rd-rto-max", l.MaxRTO.String(), "RD: largest retransmission timeout, after backoff (`duration`)"),
		rtoInitial: str("rd-rto-initial", l.InitialRTO.String(), "RD: retransmission timeout before any RTT sample (`duration`)"),
		ackDelay:   str("rd-ack-delay", l.AckDelay.String(), "RD: delay of a standalone ACK (`duration`)"),
		idle:       str("rd-idle-timeout", l.IdleTimeout.String(), "RD: per-peer state with nothing outstanding is reclaimed after this `duration`"),
		notReady:   str("rd-notready-backoff", l.NotReadyBackoff.String(), "RD: first wait before resending a datagram the receiver had no receive for (`duration`)"),
		maxMsg:     str("max-msg-rd", strconv.Itoa(def.MaxMsg), "largest RD message (Send or RDMA Read), `octets`"),
		ird:        str("rd-ird", strconv.Itoa(def.IRD), "RD: RDMA Read Requests a QP answers at a time (1..1024)"),
		ord:        str("rd-ord", strconv.Itoa(def.ORD), "RD: RDMA Reads a QP has outstanding (1..1024)"),
		reorderQP:  str("rd-reorder-qp-bytes", strconv.Itoa(def.ReorderQPBytes), "RD: out-of-order datagrams one QP keeps, at most this many `octets` (more are dropped and resent by their senders)"),
		reorderAll: str("rd-reorder-bytes", strconv.Itoa(def.ReorderBytes), "RD: out-of-order datagrams all QPs of the daemon keep, at most this many `octets`"),
		replyRate:  str("rd-reply-rate", strconv.Itoa(l.ReplyRate), "RD: Challenges and RESETs a QP sends per second to addresses that have not proven themselves (docs/rd.md)"),
		replyBurst: str("rd-reply-burst", strconv.Itoa(l.ReplyBurst), "RD: burst of -rd-reply-rate"),
		linger:     str("rd-linger", def.Linger.String(), "RD: how long the port of a destroyed QP keeps acknowledging its peers' retransmissions of what it delivered (`duration`; 0: 2 × -rd-rto-max; negative: not at all)"),
	}
}

// parseRD reads the -rd-* flags into the device's RD policy.
func parseRD(f rdFlags, def vcfg.RDConfig, from func(string) string) (vcfg.RDConfig, error) {
	c := def
	for _, it := range []struct {
		name string
		s    *string
		dst  *int
	}{{"rd-window", f.window, &c.Link.Window}, {"rd-max-retries", f.retries, &c.Link.MaxRetries},
		{"max-msg-rd", f.maxMsg, &c.MaxMsg}, {"rd-ird", f.ird, &c.IRD}, {"rd-ord", f.ord, &c.ORD},
		{"rd-reorder-qp-bytes", f.reorderQP, &c.ReorderQPBytes}, {"rd-reorder-bytes", f.reorderAll, &c.ReorderBytes},
		{"rd-reply-rate", f.replyRate, &c.Link.ReplyRate}, {"rd-reply-burst", f.replyBurst, &c.Link.ReplyBurst}} {
		n, err := strconv.Atoi(*it.s)
		if err != nil {
			return c, fmt.Errorf("%s %q: want an integer", from(it.name), *it.s)
		}
		*it.dst = n
	}
	for _, d := range []struct {
		name string
		s    *string
		dst  *time.Duration
	}{{"rd-rto-min", f.rtoMin, &c.Link.MinRTO}, {"rd-rto-max", f.rtoMax, &c.Link.MaxRTO},
		{"rd-rto-initial", f.rtoInitial, &c.Link.InitialRTO}, {"rd-ack-delay", f.ackDelay, &c.Link.AckDelay},
		{"rd-idle-timeout", f.idle, &c.Link.IdleTimeout}, {"rd-notready-backoff", f.notReady, &c.Link.NotReadyBackoff},
		{"rd-linger", f.linger, &c.Linger}} {
		v, err := time.ParseDuration(*d.s)
		if err != nil {
			return c, fmt.Errorf("%s: %w", from(d.name), err)
		}
		*d.dst = v
	}
	return c, nil
}
