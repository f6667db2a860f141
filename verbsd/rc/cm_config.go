package rc

import (
	"github.com/iwarpd/iwarpd/mpa"
	"github.com/iwarpd/iwarpd/proto"
	"github.com/iwarpd/iwarpd/verbsd/config"
)

// Listen backlog: the default and the largest a listener may ask.
const (
	defaultBacklog = 16
	maxBacklog     = 128
)

func orDefault(v, def uint16) uint16 {
	if v == 0 {
		if def == 0 {
			return config.DefaultIRDORD
		}
		return def
	}
	return v
}

func crcPolicy(c proto.MPACRC) mpa.CRCPolicy {
	switch c {
	case proto.MPACRCRequired:
		return mpa.CRCRequired
	case proto.MPACRCOff:
		return mpa.CRCOff
	}
	return mpa.CRCPreferred
}

// responderPolicy is the policy a listener negotiates with: the device's,
// with the accepting client's private data and IRD/ORD.
func responderPolicy(c config.MPAConfig, privateData []byte, ird, ord uint16) mpa.Policy {
	return mpa.Policy{
		Revision:    c.Revision,
		CRC:         crcPolicy(c.CRC),
		Markers:     c.Markers,
		IRD:         orDefault(ird, c.IRD),
		ORD:         orDefault(ord, c.ORD),
		RTRTypes:    mpa.RTRSet(c.RTR),
		PrivateData: privateData,
		AcceptRev0:  true, // siw does; answered in kind
	}
}

// initiatorPolicy is the device's policy overridden by the connection's
// options.
func initiatorPolicy(c config.MPAConfig, o proto.MPAOptions, privateData []byte, ird, ord uint16) mpa.Policy {
	p := mpa.Policy{
		Revision:    c.Revision,
		CRC:         crcPolicy(c.CRC),
		Markers:     o.Markers.Resolve(c.Markers),
		IRD:         orDefault(ird, c.IRD),
		ORD:         orDefault(ord, c.ORD),
		RTRTypes:    mpa.RTRSet(c.RTR),
		PrivateData: privateData,
	}
	if o.Revision != 0 {
		p.Revision = o.Revision
	}
	if o.CRC != proto.MPACRCDefault {
		p.CRC = crcPolicy(o.CRC)
	}
	if o.RTR != 0 {
		p.RTRTypes = mpa.RTRSet(o.RTR)
	}
	// A Rev 1 connection cannot be peer-to-peer: the device default yields,
	// an explicit request is reported by Validate.
	p.PeerToPeer = o.PeerToPeer.Resolve(c.PeerToPeer && p.Revision != 1)
	return p
}

// mpaParams converts negotiated parameters for CM events.
func mpaParams(p mpa.Params) *proto.MPAParams {
	return &proto.MPAParams{Revision: p.Revision, Enhanced: p.Enhanced, CRC: p.CRC, MarkersTx: p.MarkersTx,
		MarkersRx: p.MarkersRx, PeerToPeer: p.PeerToPeer, RTR: rtrBit(p.RTR), PeerIRD: p.PeerIRD, PeerORD: p.PeerORD}
}

func rtrBit(t mpa.RTRType) proto.RTRSet {
	switch t {
	case mpa.RTRSend:
		return proto.RTRSend
	case mpa.RTRWrite:
		return proto.RTRWrite
	case mpa.RTRRead:
		return proto.RTRRead
	}
	return 0
}
