package rdmap

import (
	"testing"

	"github.com/iwarpd/iwarpd/iwerr"
)

// The mapping of siw_tagged_error / siw_rdmap_error (drivers/infiniband/sw/siw/siw_qp.c),
// plus TO wrap, which siw never reports.
func TestAccessErrors(t *testing.T) {
	cases := []struct {
		f            AccessFault
		tagged, rdma iwerr.Error
		name         string
	}{
		{FaultInvalidStag, iwerr.DDPInvalidStag, iwerr.RDMAPInvalidStag, "invalid STag"},
		{FaultBaseBounds, iwerr.DDPBaseBounds, iwerr.RDMAPBaseBounds, "base or bounds violation"},
		{FaultAccessRights, iwerr.RDMAPAccessRights, iwerr.RDMAPAccessRights, "access rights violation"},
		{FaultPDMismatch, iwerr.DDPStagNotAssociated, iwerr.RDMAPStagNotAssociated, "STag not associated"},
		{FaultTOWrap, iwerr.DDPTOWrap, iwerr.RDMAPTOWrap, "TO wrap"},
		{0, iwerr.DDPInvalidStag, iwerr.RDMAPProtectionUnspecified, "unknown access fault"},
		{99, iwerr.DDPInvalidStag, iwerr.RDMAPProtectionUnspecified, "unknown access fault"},
	}
	for _, c := range cases {
		if got := TaggedError(c.f); got != c.tagged {
			t.Errorf("TaggedError(%v) = %v, want %v", c.f, got, c.tagged)
		}
		if got := RDMAPError(c.f); got != c.rdma {
			t.Errorf("RDMAPError(%v) = %v, want %v", c.f, got, c.rdma)
		}
		if c.f.String() != c.name {
			t.Errorf("String(%d) = %q", c.f, c.f.String())
		}
		for _, op := range []Opcode{OpWrite, OpReadResponse, OpWriteRecord} {
			if got := AccessError(op, c.f); got != c.tagged {
				t.Errorf("AccessError(%v, %v) = %v", op, c.f, got)
			}
		}
		for _, op := range []Opcode{OpReadRequest, OpSendInvalidate, OpSendSEInvalidate, 0xf} {
			if got := AccessError(op, c.f); got != c.rdma {
				t.Errorf("AccessError(%v, %v) = %v", op, c.f, got)
			}
		}
	}
}
