package iwerr

import (
	"errors"
	"fmt"
	"testing"
)

func TestNamesAndCodes(t *testing.T) {
	cases := []struct {
		err               Error
		layer, etype, cod uint8
		text              string
	}{
		{RDMAPInvalidStag, 0, 1, 0x00, "rdmap: remote protection: invalid STag"},
		{RDMAPAccessRights, 0, 1, 0x02, "rdmap: remote protection: access rights violation"},
		{RDMAPCannotInvalidate, 0, 1, 0x09, "rdmap: remote protection: STag cannot be invalidated"},
		{RDMAPUnexpectedOpcode, 0, 2, 0x06, "rdmap: remote operation: unexpected opcode"},
		{DDPBaseBounds, 1, 1, 0x01, "ddp: tagged buffer: base or bounds violation"},
		{DDPTaggedInvalidVersion, 1, 1, 0x04, "ddp: tagged buffer: invalid DDP version"},
		{DDPInvalidQN, 1, 2, 0x01, "ddp: untagged buffer: invalid QN"},
		{DDPMessageTooLong, 1, 2, 0x05, "ddp: untagged buffer: DDP message too long for available buffer"},
		{DDPUntaggedInvalidVersion, 1, 2, 0x06, "ddp: untagged buffer: invalid DDP version"},
		{MPACRCError, 2, 0, 0x02, "llp: mpa: MPA CRC error"},
		{MPAInvalidReqReply, 2, 0, 0x04, "llp: mpa: invalid MPA request or reply"},
		{MPAInsufficientIRD, 2, 0, 0x06, "llp: mpa: insufficient IRD resources"},
		{MPANoMatchingRTR, 2, 0, 0x07, "llp: mpa: no matching RTR option"},
	}
	for _, c := range cases {
		t.Run(c.text, func(t *testing.T) {
			if uint8(c.err.Layer) != c.layer || c.err.Type != c.etype || c.err.Code != c.cod {
				t.Fatalf("triple = %d/%d/%#x, want %d/%d/%#x", c.err.Layer, c.err.Type, c.err.Code, c.layer, c.etype, c.cod)
			}
			if got := c.err.Error(); got != c.text {
				t.Fatalf("Error() = %q, want %q", got, c.text)
			}
			if !c.err.Known() {
				t.Fatal("Known() = false for a registered code")
			}
		})
	}
}

func TestIs(t *testing.T) {
	wrapped := fmt.Errorf("ddp: segment 3: %w", DDPInvalidMSNRange)
	if !errors.Is(wrapped, DDPInvalidMSNRange) {
		t.Fatal("errors.Is does not see the wrapped value")
	}
	if !errors.Is(wrapped, &Error{LayerDDP, DDPUntaggedBuffer, 0x03}) {
		t.Fatal("errors.Is does not match a pointer with the same triple")
	}
	if errors.Is(wrapped, DDPInvalidMSNNoBuffer) {
		t.Fatal("errors.Is matched a different code")
	}
	var e Error
	if !errors.As(wrapped, &e) || e != DDPInvalidMSNRange {
		t.Fatalf("errors.As = %v", e)
	}
}

func TestUnknownCodesStillPrint(t *testing.T) {
	e := Error{Layer: 7, Type: 9, Code: 0x42}
	if e.Known() {
		t.Fatal("made-up triple reported as known")
	}
	if got, want := e.Error(), "layer(7): type 0x9: code 0x42"; got != want {
		t.Fatalf("Error() = %q, want %q", got, want)
	}
	// Every code under a local catastrophic type is registered ("all codes").
	if !(Error{LayerDDP, DDPLocalCatastrophic, 0x33}).Known() {
		t.Fatal("DDP local catastrophic with any code should be known")
	}
}
