package rdmap

import (
	"fmt"
	"testing"
)

// TestOpcodeTable checks every row against RFC 5040 §4.3 (Table 2/3) and
// RFC 7306 (Atomic Request on QN 1, Atomic Response on QN 3, Immediate Data
// on QN 0) and the datagram profile's Write-Record.
func TestOpcodeTable(t *testing.T) {
	type row struct {
		name      string
		tagged    bool
		qn        uint32
		headerLen int
		fixed     bool
	}
	want := map[Opcode]row{
		0x0: {"RDMA Write", true, 0, 0, true},
		0x1: {"RDMA Read Request", false, 1, 28, true},
		0x2: {"RDMA Read Response", true, 0, 0, true},
		0x3: {"Send", false, 0, 0, true},
		0x4: {"Send with Invalidate", false, 0, 0, true},
		0x5: {"Send with Solicited Event", false, 0, 0, true},
		0x6: {"Send with Solicited Event and Invalidate", false, 0, 0, true},
		0x7: {"Terminate", false, 2, 4, false},
		0x8: {"Immediate Data", false, 0, 8, true},
		0x9: {"Immediate Data with Solicited Event", false, 0, 8, true},
		0xa: {"Atomic Request", false, 1, 52, true},
		0xb: {"Atomic Response", false, 3, 12, true},
		0xc: {"RDMA Write-Record", true, 0, 12, true},
		0xd: {"RDMA Write-Record with Immediate", true, 0, 20, true},
	}
	for b := 0; b <= 0xff; b++ {
		op := Opcode(b)
		info, ok := op.Info()
		w, defined := want[op]
		if ok != defined {
			t.Errorf("opcode 0x%x: defined %v, want %v", b, ok, defined)
			continue
		}
		if !defined {
			if info != (OpcodeInfo{}) {
				t.Errorf("opcode 0x%x: undefined but Info = %+v", b, info)
			}
			if got := op.String(); got != fmt.Sprintf("opcode 0x%x", b) {
				t.Errorf("opcode 0x%x: String = %q", b, got)
			}
			continue
		}
		if info.Name != w.name || op.String() != w.name || info.Tagged != w.tagged ||
			info.QN != w.qn || info.HeaderLen != w.headerLen || info.Fixed != w.fixed {
			t.Errorf("opcode 0x%x: %+v, want %+v", b, info, w)
		}
	}
	if QNSend != 0 || QNReadRequest != 1 || QNTerminate != 2 || QNAtomic != 3 || QNAtomicResponse != 3 {
		t.Error("queue number constants")
	}
}

func TestOpcodeQPTypes(t *testing.T) {
	cases := []struct {
		op   Opcode
		want QPTypes
	}{
		{OpWrite, RC},
		{OpReadRequest, RC | RD},
		{OpReadResponse, RC | RD},
		{OpSend, RC | UD | RD},
		{OpSendInvalidate, RC},
		{OpSendSE, RC | UD | RD},
		{OpTerminate, RC | UD | RD},
		{OpAtomicRequest, RC | RD},
		{OpAtomicResponse, RC | RD},
		{OpImmediateData, RC | UD | RD},
		{OpImmediateDataSE, RC | UD | RD},
		{OpWriteRecord, UD | RD},
		{OpWriteRecordImm, UD | RD},
	}
	for _, c := range cases {
		if info, _ := c.op.Info(); info.QPTypes != c.want {
			t.Errorf("%v: QPTypes %b, want %b", c.op, info.QPTypes, c.want)
		}
	}
}

func TestControl(t *testing.T) {
	// Golden control octets from protocol-notes.md and the siw captures.
	cases := []struct {
		op   Opcode
		want Control
	}{
		{OpWrite, 0x40}, {OpReadRequest, 0x41}, {OpReadResponse, 0x42},
		{OpSend, 0x43}, {OpTerminate, 0x47}, {OpWriteRecord, 0x4c}, {OpWriteRecordImm, 0x4d},
	}
	for _, c := range cases {
		got := MakeControl(c.op)
		if got != c.want || got.Opcode() != c.op || got.Version() != Version || got.Reserved() != 0 {
			t.Errorf("MakeControl(%v) = %#x", c.op, uint8(got))
		}
	}
	if c := Control(0xb5); c.Version() != 2 || c.Reserved() != 3 || c.Opcode() != 5 {
		t.Errorf("Control(0xb5) = v%d r%d op%d", c.Version(), c.Reserved(), c.Opcode())
	}
}
