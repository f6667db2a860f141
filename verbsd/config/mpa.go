package config

import (
	"fmt"
	"time"

	"github.com/iwarpd/iwarpd/proto"
)

// MPAConfig is the device's MPA policy (iwarpd -mpa-* flags): what a
// responder accepts and what an initiator asks for unless the connection's
// own options (proto.MPAOptions) say otherwise. The zero value is the
// RFC-conforming default: Rev 2, CRC preferred, no markers, client/server
// mode, Write and Read RTR acceptable, IRD = ORD = 16, 10 s timeout.
type MPAConfig struct {
	Revision   uint8        // 1 or 2 (0: 2)
	CRC        proto.MPACRC // 0: preferred
	Markers    bool         // ask peers for markers
	PeerToPeer bool         // initiators ask for RFC 6581 peer-to-peer mode
	// RTR: types offered (initiator) and acceptable (responder) in
	// peer-to-peer mode (0: Write and Read, as siw).
	RTR proto.RTRSet
	// IRD, ORD: defaults when Connect/Accept give 0 (0: 16).
	IRD, ORD uint16
	// Timeout bounds reading the MPA Request, the wait for the MPA Reply
	// (and TCP connect), and how long an unanswered connection request is
	// kept (0: 10 s).
	Timeout time.Duration
}

// Defaults and limits of connection establishment.
const (
	DefaultIRDORD     = 16  // IRD/ORD when neither the client nor the device says
	MaxIRDORD         = 128 // siw's maximum; the datapath enforces IRD/ORD
	DefaultMPATimeout = 10 * time.Second
)

// Validate reports a policy MPA cannot express.
func (c MPAConfig) Validate() error {
	if c.Revision > 2 {
		return fmt.Errorf("MPA revision %d: want 1 or 2", c.Revision)
	}
	if c.CRC > proto.MPACRCOff {
		return fmt.Errorf("MPA CRC policy %d unknown", c.CRC)
	}
	if c.PeerToPeer && c.Revision == 1 {
		return fmt.Errorf("MPA peer-to-peer mode needs revision 2")
	}
	if c.RTR&^(proto.RTRSend|proto.RTRWrite|proto.RTRRead) != 0 {
		return fmt.Errorf("MPA RTR set %#x unknown", uint8(c.RTR))
	}
	if c.IRD > MaxIRDORD || c.ORD > MaxIRDORD {
		return fmt.Errorf("IRD %d / ORD %d: at most %d", c.IRD, c.ORD, MaxIRDORD)
	}
	if c.Timeout < 0 {
		return fmt.Errorf("MPA timeout %v is negative", c.Timeout)
	}
	return nil
}

func (c MPAConfig) TimeoutOrDefault() time.Duration {
	if c.Timeout <= 0 {
		return DefaultMPATimeout
	}
	return c.Timeout
}
