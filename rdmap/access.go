package rdmap

import "github.com/iwarpd/iwarpd/iwerr"

// AccessFault is why a remote memory access (an STag + TO + length checked
// against the registered region) failed, independent of which layer reports
// it. The engine's memory registry returns one; TaggedError and RDMAPError
// turn it into the Terminate triple, as Linux siw's siw_tagged_error and
// siw_rdmap_error do.
type AccessFault uint8

const (
	FaultInvalidStag  AccessFault = iota + 1 // no such STag, or invalidated
	FaultBaseBounds                          // TO range outside the region
	FaultAccessRights                        // region lacks the remote right (write, read, ...)
	FaultPDMismatch                          // STag not associated with this stream / QP's PD
	FaultTOWrap                              // TO + length passes 2^64
)

// String names f.
func (f AccessFault) String() string {
	switch f {
	case FaultInvalidStag:
		return "invalid STag"
	case FaultBaseBounds:
		return "base or bounds violation"
	case FaultAccessRights:
		return "access rights violation"
	case FaultPDMismatch:
		return "STag not associated"
	case FaultTOWrap:
		return "TO wrap"
	}
	return "unknown access fault"
}

// TaggedError is the DDP tagged-buffer error (Layer 1, EType 1) for a fault
// found while placing an inbound tagged segment: RDMA Write, RDMA Read
// Response, and the datagram profile's Write-Record. RFC 5041 has no DDP
// code for access rights; an STag that is valid but whose region lacks the
// right (a Write or Write-Record to memory registered without remote write)
// is reported as what it is, the RDMAP Remote Protection Error "access
// rights violation" (RFC 5040 §4.8, code 0x02; the error handling of
// §7.4.1), not as "invalid STag" (siw's choice, which told the peer the
// wrong thing). An unknown fault maps to "invalid STag".
func TaggedError(f AccessFault) iwerr.Error {
	switch f {
	case FaultAccessRights:
		return iwerr.RDMAPAccessRights
	case FaultBaseBounds:
		return iwerr.DDPBaseBounds
	case FaultPDMismatch:
		return iwerr.DDPStagNotAssociated
	case FaultTOWrap:
		return iwerr.DDPTOWrap
	}
	return iwerr.DDPInvalidStag // FaultInvalidStag, unknown
}

// RDMAPError is the RDMAP remote-protection error (Layer 0, EType 1) for a
// fault RDMAP itself finds: the Data Source of an inbound RDMA Read Request
// (checked when the Read Response is built), and the STag of a Send with
// Invalidate. An unknown fault maps to "unspecified".
func RDMAPError(f AccessFault) iwerr.Error {
	switch f {
	case FaultInvalidStag:
		return iwerr.RDMAPInvalidStag
	case FaultBaseBounds:
		return iwerr.RDMAPBaseBounds
	case FaultAccessRights:
		return iwerr.RDMAPAccessRights
	case FaultPDMismatch:
		return iwerr.RDMAPStagNotAssociated
	case FaultTOWrap:
		return iwerr.RDMAPTOWrap
	}
	return iwerr.RDMAPProtectionUnspecified
}

// AccessError maps f for the opcode whose processing found it: the DDP
// triple for inbound tagged placement (opcodes whose table row is Tagged),
// the RDMAP triple for everything else (Read Request source, invalidation).
func AccessError(op Opcode, f AccessFault) iwerr.Error {
	if info, ok := op.Info(); ok && info.Tagged {
		return TaggedError(f)
	}
	return RDMAPError(f)
}
