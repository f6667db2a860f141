package iwerr

import "fmt"

// Layer is the 4-bit Layer field of the Terminate Control word (RFC 5040 §6.4.1).
type Layer uint8

const (
	LayerRDMAP Layer = 0 // RDMAP (RFC 5040 §7.2)
	LayerDDP   Layer = 1 // DDP (RFC 5041 §7.2)
	LayerLLP   Layer = 2 // the lower layer: MPA over TCP (RFC 5044 §8), or the datagram LLP
)

func (l Layer) String() string {
	switch l {
	case LayerRDMAP:
		return "rdmap"
	case LayerDDP:
		return "ddp"
	case LayerLLP:
		return "llp"
	}
	return fmt.Sprintf("layer(%d)", uint8(l))
}

// Error types (the 4-bit EType field), per layer.
const (
	// RDMAP (RFC 5040 §7.2).
	RDMAPLocalCatastrophic uint8 = 0
	RDMAPRemoteProtection  uint8 = 1
	RDMAPRemoteOperation   uint8 = 2

	// DDP (RFC 5041 §7.2).
	DDPLocalCatastrophic uint8 = 0
	DDPTaggedBuffer      uint8 = 1
	DDPUntaggedBuffer    uint8 = 2
	DDPReservedForLLP    uint8 = 3 // never sent by DDP itself

	// LLP: MPA is the only registered LLP error type (RFC 5044 §8).
	LLPMPA uint8 = 0
)

// Error is one TERMINATE error triple. It is comparable, and errors.Is matches
// two Errors with the same triple, so callers can write
// errors.Is(err, iwerr.DDPInvalidStag).
type Error struct {
	Layer Layer
	Type  uint8 // EType
	Code  uint8 // ECode
}

// Error returns "layer: type: code" with the RFC names.
func (e Error) Error() string {
	return fmt.Sprintf("%s: %s: %s", e.Layer, e.TypeName(), e.CodeName())
}

// Is reports whether target is an Error (value or pointer) with the same triple.
func (e Error) Is(target error) bool {
	switch t := target.(type) {
	case Error:
		return t == e
	case *Error:
		return t != nil && *t == e
	}
	return false
}

// Known reports whether the triple is one the registries define.
func (e Error) Known() bool {
	_, ok := codeNames[e]
	if ok {
		return true
	}
	// "All codes" under a local catastrophic type.
	return e.Type == 0 && (e.Layer == LayerRDMAP || e.Layer == LayerDDP)
}

// TypeName names the error type of e's layer.
func (e Error) TypeName() string {
	if n, ok := typeNames[[2]uint8{uint8(e.Layer), e.Type}]; ok {
		return n
	}
	return fmt.Sprintf("type 0x%x", e.Type)
}

// CodeName names the error code of e's layer and type.
func (e Error) CodeName() string {
	if n, ok := codeNames[e]; ok {
		return n
	}
	if e.Type == 0 && (e.Layer == LayerRDMAP || e.Layer == LayerDDP) {
		return "local catastrophic error"
	}
	return fmt.Sprintf("code 0x%02x", e.Code)
}

// RDMAP errors (RFC 5040 §7.2, IANA "RDMAP Errors").
var (
	RDMAPLocalCatastrophicError = Error{LayerRDMAP, RDMAPLocalCatastrophic, 0x00}

	RDMAPInvalidStag           = Error{LayerRDMAP, RDMAPRemoteProtection, 0x00}
	RDMAPBaseBounds            = Error{LayerRDMAP, RDMAPRemoteProtection, 0x01}
	RDMAPAccessRights          = Error{LayerRDMAP, RDMAPRemoteProtection, 0x02}
	RDMAPStagNotAssociated     = Error{LayerRDMAP, RDMAPRemoteProtection, 0x03}
	RDMAPTOWrap                = Error{LayerRDMAP, RDMAPRemoteProtection, 0x04}
	RDMAPCannotInvalidate      = Error{LayerRDMAP, RDMAPRemoteProtection, 0x09}
	RDMAPProtectionUnspecified = Error{LayerRDMAP, RDMAPRemoteProtection, 0xff}

	RDMAPInvalidVersion       = Error{LayerRDMAP, RDMAPRemoteOperation, 0x05}
	RDMAPUnexpectedOpcode     = Error{LayerRDMAP, RDMAPRemoteOperation, 0x06}
	RDMAPCatastrophicStream   = Error{LayerRDMAP, RDMAPRemoteOperation, 0x07}
	RDMAPCatastrophicGlobal   = Error{LayerRDMAP, RDMAPRemoteOperation, 0x08}
	RDMAPOperationUnspecified = Error{LayerRDMAP, RDMAPRemoteOperation, 0xff}
)

// DDP errors (RFC 5041 §7.2, IANA "DDP Errors").
var (
	DDPLocalCatastrophicError = Error{LayerDDP, DDPLocalCatastrophic, 0x00}

	DDPInvalidStag          = Error{LayerDDP, DDPTaggedBuffer, 0x00}
	DDPBaseBounds           = Error{LayerDDP, DDPTaggedBuffer, 0x01}
	DDPStagNotAssociated    = Error{LayerDDP, DDPTaggedBuffer, 0x02}
	DDPTOWrap               = Error{LayerDDP, DDPTaggedBuffer, 0x03}
	DDPTaggedInvalidVersion = Error{LayerDDP, DDPTaggedBuffer, 0x04}

	DDPInvalidQN              = Error{LayerDDP, DDPUntaggedBuffer, 0x01}
	DDPInvalidMSNNoBuffer     = Error{LayerDDP, DDPUntaggedBuffer, 0x02}
	DDPInvalidMSNRange        = Error{LayerDDP, DDPUntaggedBuffer, 0x03}
	DDPInvalidMO              = Error{LayerDDP, DDPUntaggedBuffer, 0x04}
	DDPMessageTooLong         = Error{LayerDDP, DDPUntaggedBuffer, 0x05}
	DDPUntaggedInvalidVersion = Error{LayerDDP, DDPUntaggedBuffer, 0x06}
)

// MPA errors (RFC 5044 §8; 0x05–0x07 from RFC 6581 §8).
var (
	MPAConnectionLost    = Error{LayerLLP, LLPMPA, 0x01}
	MPACRCError          = Error{LayerLLP, LLPMPA, 0x02}
	MPAMarkerMismatch    = Error{LayerLLP, LLPMPA, 0x03}
	MPAInvalidReqReply   = Error{LayerLLP, LLPMPA, 0x04}
	MPALocalCatastrophic = Error{LayerLLP, LLPMPA, 0x05}
	MPAInsufficientIRD   = Error{LayerLLP, LLPMPA, 0x06}
	MPANoMatchingRTR     = Error{LayerLLP, LLPMPA, 0x07}
)

var typeNames = map[[2]uint8]string{
	{uint8(LayerRDMAP), RDMAPLocalCatastrophic}: "local catastrophic",
	{uint8(LayerRDMAP), RDMAPRemoteProtection}:  "remote protection",
	{uint8(LayerRDMAP), RDMAPRemoteOperation}:   "remote operation",
	{uint8(LayerDDP), DDPLocalCatastrophic}:     "local catastrophic",
	{uint8(LayerDDP), DDPTaggedBuffer}:          "tagged buffer",
	{uint8(LayerDDP), DDPUntaggedBuffer}:        "untagged buffer",
	{uint8(LayerDDP), DDPReservedForLLP}:        "reserved for llp",
	{uint8(LayerLLP), LLPMPA}:                   "mpa",
}

var codeNames = map[Error]string{
	RDMAPLocalCatastrophicError: "local catastrophic error",
	RDMAPInvalidStag:            "invalid STag",
	RDMAPBaseBounds:             "base or bounds violation",
	RDMAPAccessRights:           "access rights violation",
	RDMAPStagNotAssociated:      "STag not associated with RDMAP stream",
	RDMAPTOWrap:                 "TO wrap",
	RDMAPCannotInvalidate:       "STag cannot be invalidated",
	RDMAPProtectionUnspecified:  "unspecified error",
	RDMAPInvalidVersion:         "invalid RDMAP version",
	RDMAPUnexpectedOpcode:       "unexpected opcode",
	RDMAPCatastrophicStream:     "catastrophic error, localized to RDMAP stream",
	RDMAPCatastrophicGlobal:     "catastrophic error, global",
	RDMAPOperationUnspecified:   "unspecified error",

	DDPLocalCatastrophicError: "local catastrophic error",
	DDPInvalidStag:            "invalid STag",
	DDPBaseBounds:             "base or bounds violation",
	DDPStagNotAssociated:      "STag not associated with DDP stream",
	DDPTOWrap:                 "TO wrap",
	DDPTaggedInvalidVersion:   "invalid DDP version",
	DDPInvalidQN:              "invalid QN",
	DDPInvalidMSNNoBuffer:     "invalid MSN, no buffer available",
	DDPInvalidMSNRange:        "invalid MSN, MSN range is not valid",
	DDPInvalidMO:              "invalid MO",
	DDPMessageTooLong:         "DDP message too long for available buffer",
	DDPUntaggedInvalidVersion: "invalid DDP version",

	MPAConnectionLost:    "TCP connection closed, terminated or lost",
	MPACRCError:          "MPA CRC error",
	MPAMarkerMismatch:    "MPA marker and ULPDU length field mismatch",
	MPAInvalidReqReply:   "invalid MPA request or reply",
	MPALocalCatastrophic: "local catastrophic error",
	MPAInsufficientIRD:   "insufficient IRD resources",
	MPANoMatchingRTR:     "no matching RTR option",
}
