package config

import (
	"fmt"
	"time"

	"github.com/iwarpd/iwarpd/llp/rd"
)

// RDConfig is the RD policy of the device (iwarpd -rd-* flags).
type RDConfig struct {
	// Link is the reliability state machine's configuration.
	Link rd.Config
	// MaxMsg is the largest RD message (Send or RDMA Read), octets.
	MaxMsg int
	// IRD bounds the Read Requests a QP answers at a time (responder);
	// ORD the RDMA Reads a QP has outstanding (requester).
	IRD, ORD int
	// MaxErrorMessages bounds the error messages queued per QP.
	MaxErrorMessages int
	// ReorderQPBytes bounds the reorder store (out-of-order DATA kept
	// until its turn) of one QP, ReorderBytes that of all QPs of the
	// device, in octets of buffer: a datagram beyond either is dropped
	// (its sender resends it), never an in-order one (rd_reorder_full).
	ReorderQPBytes, ReorderBytes int
	// Linger is how long the port of a destroyed RD QP keeps answering its
	// peers' retransmissions (rd/linger.go, -rd-linger): 0 is 2 ×
	// Link.MaxRTO, negative none.
	Linger time.Duration
}

// DefaultRDConfig returns the RD defaults.
func DefaultRDConfig() RDConfig {
	return RDConfig{Link: rd.DefaultConfig(), MaxMsg: 64 << 20, IRD: 16, ORD: 16, MaxErrorMessages: 64,
		ReorderQPBytes: 32 << 20, ReorderBytes: 128 << 20}
}

// validate checks the policy (part of Config.Validate).
func (c RDConfig) validate() error {
	l := c.Link
	switch {
	case c.MaxMsg < 0 || c.MaxMsg > 1<<30:
		return fmt.Errorf("max RD message %d: want 0..1GiB", c.MaxMsg)
	case c.IRD < 1 || c.ORD < 1 || c.IRD > 1024 || c.ORD > 1024:
		return fmt.Errorf("RD IRD/ORD %d/%d: want 1..1024", c.IRD, c.ORD)
	case c.MaxErrorMessages < 1:
		return fmt.Errorf("RD error message queue %d: want at least 1", c.MaxErrorMessages)
	case l.Window < 1 || l.Window > 65535:
		return fmt.Errorf("rd-window %d: want 1..65535", l.Window)
	case l.MaxRetries < 1:
		return fmt.Errorf("rd-max-retries %d: want at least 1", l.MaxRetries)
	case c.ReorderQPBytes < 0 || c.ReorderBytes < 0:
		return fmt.Errorf("rd-reorder-qp-bytes %d, rd-reorder-bytes %d: want ≥ 0", c.ReorderQPBytes, c.ReorderBytes)
	case l.ReplyRate < 1 || l.ReplyBurst < 1:
		return fmt.Errorf("rd-reply-rate %d, rd-reply-burst %d: want ≥ 1", l.ReplyRate, l.ReplyBurst)
	case l.MinRTO <= 0 || l.MaxRTO < l.MinRTO || l.InitialRTO <= 0:
		return fmt.Errorf("rd RTO: min %v, initial %v, max %v: want 0 < min ≤ max, initial > 0", l.MinRTO, l.InitialRTO, l.MaxRTO)
	}
	return nil
}

// RdLingerTime is how long a destroyed RD QP's port lingers: -rd-linger,
// 0 meaning 2 × -rd-rto-max (two retransmissions of the peer at its
// largest timeout when ours are alike); negative: not at all.
func (c *RDConfig) RdLingerTime() time.Duration {
	if c.Linger == 0 {
		return 2 * c.Link.MaxRTO
	}
	return max(c.Linger, 0)
}
