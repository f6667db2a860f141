package proto

import (
	"encoding/json"
	"reflect"
	"testing"
)

func TestCMOps(t *testing.T) {
	for op, name := range map[Op]string{OpListen: "listen", OpCloseListener: "close-listener", OpAccept: "accept",
		OpReject: "reject", OpConnect: "connect", OpDisconnect: "disconnect", OpCMEvent: "cm-event",
		OpConnect | OpReply: "connect reply"} {
		if got := op.String(); got != name {
			t.Errorf("%d: %q, want %q", uint16(op), got, name)
		}
	}
	if !OpDisconnect.Valid() || OpCMEvent.Valid() {
		t.Error("OpDisconnect must be a request, OpCMEvent not")
	}
	// OpCMEvent carries the event bit: the daemon refuses it as a request.
	if OpCMEvent&OpEvent == 0 || OpCMEvent&OpReply != 0 {
		t.Errorf("OpCMEvent %#x", uint16(OpCMEvent))
	}
	if OpListen != OpInspect+1 {
		t.Error("CM ops must follow the verbs ops")
	}
}

func TestCMEventRoundTrip(t *testing.T) {
	ev := CMEvent{Type: CMEstablished, Listener: 3, Conn: 9, QP: 4, Peer: "127.0.0.1:9999", Local: "127.0.0.1:4791",
		PrivateData: []byte{0, 1, 0xff}, IRD: 8, ORD: 4, Status: 0, Detail: "x",
		MPA: &MPAParams{Revision: 2, Enhanced: true, CRC: true, PeerToPeer: true, RTR: RTRRead, PeerIRD: 4, PeerORD: 8}}
	b, err := json.Marshal(ev)
	if err != nil {
		t.Fatal(err)
	}
	var got CMEvent
	if err := Unmarshal(b, &got); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, ev) {
		t.Errorf("round trip: %+v, want %+v", got, ev)
	}
	req := ConnectRequest{QP: 2, Addr: "10.0.0.1:1", PrivateData: []byte("pd"),
		MPA: MPAOptions{Revision: 1, CRC: MPACRCOff, Markers: ToggleOn, PeerToPeer: ToggleOff, RTR: RTRSend}, TimeoutMs: 5}
	b, _ = json.Marshal(req)
	var greq ConnectRequest
	if err := Unmarshal(b, &greq); err != nil || !reflect.DeepEqual(greq, req) {
		t.Errorf("ConnectRequest: %+v, %v", greq, err)
	}
	if err := Unmarshal([]byte(`{"qp":1,"abort":true,"extra":1}`), &DisconnectRequest{}); err == nil {
		t.Error("unknown field accepted")
	}
}

func TestCMEnums(t *testing.T) {
	if CMConnectionError.String() != "connection-error" || CMEventType(99).String() != "cm-event(99)" {
		t.Error("CMEventType names")
	}
	for s, want := range map[string]MPACRC{"preferred": MPACRCPreferred, "required": MPACRCRequired, "off": MPACRCOff} {
		if got, err := ParseMPACRC(s); err != nil || got != want || got.String() != s {
			t.Errorf("%q: %v %v", s, got, err)
		}
	}
	if _, err := ParseMPACRC("on"); err == nil {
		t.Error(`"on" accepted`)
	}
	if !ToggleDefault.Resolve(true) || ToggleDefault.Resolve(false) || !ToggleOn.Resolve(false) || ToggleOff.Resolve(true) {
		t.Error("Toggle.Resolve")
	}
}
