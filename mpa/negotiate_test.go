package mpa

import (
	"bytes"
	"errors"
	"reflect"
	"testing"

	"github.com/iwarpd/iwarpd/iwerr"
)

// wire sends f through Append and ParseFrame, as the network would.
func wire(t testing.TB, f Frame) Frame {
	t.Helper()
	g, _, err := ParseFrame(f.Append(nil))
	if err != nil {
		t.Fatalf("frame does not parse: %v (%+v)", err, f)
	}
	return g
}

func enh(e Enhanced, ulp ...byte) []byte { return append(e.Append(nil), ulp...) }

func checkNegErr(t *testing.T, err error, want iwerr.Error, reject bool) {
	t.Helper()
	var ne *NegotiationError
	if !errors.As(err, &ne) {
		t.Fatalf("err = %v, want *NegotiationError %v", err, want)
	}
	if !errors.Is(err, want) || ne.Term != want || ne.Reject != reject {
		t.Fatalf("err = %v (reject %t), want %v (reject %t)", err, ne.Reject, want, reject)
	}
}

func TestHandshakeDefaults(t *testing.T) {
	in := NewInitiator(Policy{IRD: 4, ORD: 8, PrivateData: []byte("req")})
	req := wire(t, in.Request())
	if req.Revision != 2 || !req.Enhanced || !req.CRC || req.Markers || req.Reply {
		t.Fatalf("request %+v", req)
	}
	if !bytes.Equal(req.PrivateData, enh(Enhanced{IRD: 4, ORD: 8}, 'r', 'e', 'q')) {
		t.Fatalf("request pd % x", req.PrivateData)
	}
	rs := NewResponder(Policy{IRD: 16, ORD: 2, CRC: CRCOff, PrivateData: []byte("rep")})
	rep, rp, err := rs.HandleRequest(req)
	if err != nil {
		t.Fatal(err)
	}
	wantRep := Frame{Reply: true, CRC: true, Enhanced: true, Revision: 2, PrivateData: enh(Enhanced{IRD: 8, ORD: 2}, 'r', 'e', 'p')}
	if !reflect.DeepEqual(rep, wantRep) {
		t.Fatalf("reply %+v, want %+v", rep, wantRep)
	}
	wantRP := Params{Revision: 2, Enhanced: true, CRC: true, LocalIRD: 8, LocalORD: 2, PeerIRD: 4, PeerORD: 8, PeerPrivateData: []byte("req")}
	if !reflect.DeepEqual(rp, wantRP) {
		t.Fatalf("responder params %+v, want %+v", rp, wantRP)
	}
	ip, err := in.HandleReply(wire(t, rep))
	if err != nil {
		t.Fatal(err)
	}
	wantIP := Params{Revision: 2, Enhanced: true, CRC: true, LocalIRD: 4, LocalORD: 8, PeerIRD: 8, PeerORD: 2, PeerPrivateData: []byte("rep")}
	if !reflect.DeepEqual(ip, wantIP) {
		t.Fatalf("initiator params %+v, want %+v", ip, wantIP)
	}
	if _, err := in.HandleReply(rep); !errors.Is(err, ErrState) {
		t.Fatalf("second HandleReply: %v", err)
	}
	if _, _, err := rs.HandleRequest(req); !errors.Is(err, ErrState) {
		t.Fatalf("second HandleRequest: %v", err)
	}
	if _, err := NewInitiator(Policy{}).HandleReply(rep); !errors.Is(err, ErrState) {
		t.Fatalf("HandleReply before Request: %v", err)
	}
}

// TestSiwP2PCapture replays the MPA exchange of rping-mpa2-p2p.pcap.
func TestSiwP2PCapture(t *testing.T) {
	in := NewInitiator(Policy{CRC: CRCOff, IRD: 1, ORD: 1, PeerToPeer: true, RTRTypes: RTRSetWrite | RTRSetRead})
	req := in.Request()
	if !bytes.Equal(req.PrivateData, []byte{0x80, 0x01, 0xc0, 0x01}) {
		t.Fatalf("offer % x", req.PrivateData)
	}
	rep, rp, err := NewResponder(Policy{CRC: CRCOff, IRD: 1, ORD: 1}).HandleRequest(wire(t, req))
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(rep.PrivateData, []byte{0x80, 0x01, 0x80, 0x01}) || rep.CRC {
		t.Fatalf("reply %+v", rep)
	}
	ip, err := in.HandleReply(wire(t, rep))
	if err != nil {
		t.Fatal(err)
	}
	if ip.RTR != RTRWrite || rp.RTR != RTRWrite || !ip.PeerToPeer || !rp.PeerToPeer || ip.CRC || rp.CRC {
		t.Fatalf("initiator %+v responder %+v", ip, rp)
	}
}

func TestInitiatorHandleReply(t *testing.T) {
	p2p := Policy{IRD: 8, ORD: 8, PeerToPeer: true, RTRTypes: RTRSetWrite | RTRSetRead}
	ok := func(e Enhanced) Frame {
		return Frame{Reply: true, CRC: true, Enhanced: true, Revision: 2, PrivateData: enh(e)}
	}
	tests := []struct {
		name   string
		policy Policy
		reply  Frame
		want   Params       // checked when term is zero
		term   *iwerr.Error // expected TERMINATE
	}{
		{"plain", Policy{IRD: 8, ORD: 8}, ok(Enhanced{IRD: 8, ORD: 4}),
			Params{Revision: 2, Enhanced: true, CRC: true, LocalIRD: 8, LocalORD: 8, PeerIRD: 8, PeerORD: 4}, nil},
		{"request key", Policy{}, Frame{Revision: 2}, Params{}, &iwerr.MPAInvalidReqReply},
		{"rev 3", Policy{}, Frame{Reply: true, Revision: 3}, Params{}, &iwerr.MPAInvalidReqReply},
		{"rev above request", Policy{Revision: 1}, ok(Enhanced{}), Params{}, &iwerr.MPAInvalidReqReply},
		{"rev 0", Policy{Revision: 1}, Frame{Reply: true, Revision: 0}, Params{}, &iwerr.MPAInvalidReqReply},
		{"rev 0 accepted", Policy{Revision: 1, AcceptRev0: true}, Frame{Reply: true, Revision: 0},
			Params{Revision: 0, CRC: true, PeerPrivateData: nil}, nil},
		{"pd too long", Policy{}, Frame{Reply: true, Revision: 2, PrivateData: make([]byte, 513)}, Params{}, &iwerr.MPAInvalidReqReply},
		{"crc not confirmed, preferred", Policy{}, Frame{Reply: true, Enhanced: true, Revision: 2, PrivateData: enh(Enhanced{})},
			Params{Revision: 2, Enhanced: true, CRC: true}, nil},
		{"crc not confirmed, required", Policy{CRC: CRCRequired}, Frame{Reply: true, Enhanced: true, Revision: 2, PrivateData: enh(Enhanced{})},
			Params{}, &iwerr.MPAInvalidReqReply},
		{"crc off, peer asks", Policy{CRC: CRCOff}, ok(Enhanced{}), Params{Revision: 2, Enhanced: true, CRC: true}, nil},
		{"crc off both", Policy{CRC: CRCOff}, Frame{Reply: true, Enhanced: true, Revision: 2, PrivateData: enh(Enhanced{})},
			Params{Revision: 2, Enhanced: true}, nil},
		{"crc refuse, peer asks", Policy{CRC: CRCRefuse}, ok(Enhanced{}), Params{}, &iwerr.MPAInvalidReqReply},
		{"markers both ways", Policy{Markers: true}, Frame{Reply: true, Markers: true, Enhanced: true, Revision: 2, PrivateData: enh(Enhanced{})},
			Params{Revision: 2, Enhanced: true, CRC: true, MarkersRx: true, MarkersTx: true}, nil},
		{"peer wants markers", Policy{}, Frame{Reply: true, Markers: true, Enhanced: true, Revision: 2, PrivateData: enh(Enhanced{})},
			Params{Revision: 2, Enhanced: true, CRC: true, MarkersTx: true}, nil},
		{"rev 1 fallback", Policy{IRD: 2, ORD: 2}, Frame{Reply: true, Revision: 1, PrivateData: []byte("x")},
			Params{Revision: 1, CRC: true, LocalIRD: 2, LocalORD: 2, PeerPrivateData: []byte("x")}, nil},
		{"rev 2 without S fallback", Policy{}, Frame{Reply: true, Revision: 2}, Params{Revision: 2, CRC: true}, nil},
		{"rev 1 reply, p2p asked", p2p, Frame{Reply: true, Revision: 1}, Params{}, &iwerr.MPAInvalidReqReply},
		{"rev 1 reply, enhanced required", Policy{RequireEnhanced: true}, Frame{Reply: true, Revision: 1}, Params{}, &iwerr.MPAInvalidReqReply},
		{"S without request S", Policy{Revision: 1}, Frame{Reply: true, Enhanced: true, Revision: 1, PrivateData: enh(Enhanced{})},
			Params{Revision: 1, CRC: true, PeerPrivateData: enh(Enhanced{})}, nil},
		{"S on rev 2 reply to rev 1", Policy{Revision: 1}, ok(Enhanced{}), Params{}, &iwerr.MPAInvalidReqReply},
		{"S with short pd", Policy{}, Frame{Reply: true, Enhanced: true, Revision: 2, PrivateData: []byte{1, 2}}, Params{}, &iwerr.MPAInvalidReqReply},
		{"responder ORD above our IRD", Policy{IRD: 4, ORD: 4}, ok(Enhanced{IRD: 4, ORD: 5}), Params{}, &iwerr.MPAInsufficientIRD},
		{"our ORD above responder IRD", Policy{IRD: 4, ORD: 4}, ok(Enhanced{IRD: 3, ORD: 4}), Params{}, &iwerr.MPAInsufficientIRD},
		{"our ORD lowered", Policy{IRD: 4, ORD: 4, LowerORD: true}, ok(Enhanced{IRD: 3, ORD: 4}),
			Params{Revision: 2, Enhanced: true, CRC: true, LocalIRD: 4, LocalORD: 3, PeerIRD: 3, PeerORD: 4}, nil},
		{"p2p write", p2p, ok(Enhanced{IRD: 8, ORD: 8, PeerToPeer: true, WriteRTR: true}),
			Params{Revision: 2, Enhanced: true, CRC: true, LocalIRD: 8, LocalORD: 8, PeerIRD: 8, PeerORD: 8, PeerToPeer: true, RTR: RTRWrite}, nil},
		{"p2p read", p2p, ok(Enhanced{IRD: 8, ORD: 8, PeerToPeer: true, ReadRTR: true}),
			Params{Revision: 2, Enhanced: true, CRC: true, LocalIRD: 8, LocalORD: 8, PeerIRD: 8, PeerORD: 8, PeerToPeer: true, RTR: RTRRead}, nil},
		{"p2p A not echoed", p2p, ok(Enhanced{IRD: 8, ORD: 8, WriteRTR: true}), Params{}, &iwerr.MPAInvalidReqReply},
		{"p2p send not offered", p2p, ok(Enhanced{IRD: 8, ORD: 8, PeerToPeer: true, SendRTR: true}), Params{}, &iwerr.MPANoMatchingRTR},
		{"p2p two chosen", p2p, ok(Enhanced{IRD: 8, ORD: 8, PeerToPeer: true, WriteRTR: true, ReadRTR: true}), Params{}, &iwerr.MPANoMatchingRTR},
		{"p2p none chosen", p2p, ok(Enhanced{IRD: 8, ORD: 8, PeerToPeer: true}), Params{}, &iwerr.MPANoMatchingRTR},
		{"no p2p asked, flags ignored", Policy{}, ok(Enhanced{PeerToPeer: true, ReadRTR: true}), Params{Revision: 2, Enhanced: true, CRC: true}, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			in := NewInitiator(tt.policy)
			in.Request()
			got, err := in.HandleReply(tt.reply)
			if tt.term != nil {
				checkNegErr(t, err, *tt.term, false)
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got, tt.want) {
				t.Fatalf("got  %+v\nwant %+v", got, tt.want)
			}
		})
	}
}

func TestInitiatorRejected(t *testing.T) {
	for _, rep := range []Frame{
		{Reply: true, Reject: true, Revision: 1, PrivateData: []byte("go away")},
		{Reply: true, Reject: true, Enhanced: true, Revision: 2, PrivateData: enh(Enhanced{}, []byte("go away")...)},
	} {
		in := NewInitiator(Policy{})
		in.Request()
		p, err := in.HandleReply(rep)
		var re *RejectedError
		if !errors.Is(err, ErrRejected) || !errors.As(err, &re) || string(re.PrivateData) != "go away" || string(p.PeerPrivateData) != "go away" {
			t.Fatalf("%+v: %v %+v", rep, err, p)
		}
	}
}

func TestResponderHandleRequest(t *testing.T) {
	req2 := func(e Enhanced, ulp ...byte) Frame {
		return Frame{CRC: true, Enhanced: true, Revision: 2, PrivateData: enh(e, ulp...)}
	}
	tests := []struct {
		name      string
		policy    Policy
		req       Frame
		wantReply Frame
		want      Params
		term      *iwerr.Error
	}{
		{"enhanced", Policy{IRD: 4, ORD: 4}, req2(Enhanced{IRD: 2, ORD: 6}, 'u'),
			Frame{Reply: true, CRC: true, Enhanced: true, Revision: 2, PrivateData: enh(Enhanced{IRD: 4, ORD: 2})},
			Params{Revision: 2, Enhanced: true, CRC: true, LocalIRD: 4, LocalORD: 2, PeerIRD: 2, PeerORD: 6, PeerPrivateData: []byte("u")}, nil},
		{"reply key", Policy{}, Frame{Reply: true, Revision: 1}, Frame{}, Params{}, &iwerr.MPAInvalidReqReply},
		{"rev 3", Policy{}, Frame{Revision: 3}, Frame{}, Params{}, &iwerr.MPAInvalidReqReply},
		{"rev 0", Policy{}, Frame{Revision: 0}, Frame{}, Params{}, &iwerr.MPAInvalidReqReply},
		{"rev 0 accepted", Policy{AcceptRev0: true, CRC: CRCOff}, Frame{Revision: 0},
			Frame{Reply: true, Revision: 0}, Params{Revision: 0}, nil},
		{"R bit in request", Policy{}, Frame{Reject: true, Revision: 1}, Frame{}, Params{}, &iwerr.MPAInvalidReqReply},
		{"pd too long", Policy{}, Frame{Revision: 1, PrivateData: make([]byte, 513)}, Frame{}, Params{}, &iwerr.MPAInvalidReqReply},
		{"rev 1", Policy{IRD: 3, ORD: 3, PrivateData: []byte("r")}, Frame{Revision: 1, PrivateData: []byte("q")},
			Frame{Reply: true, CRC: true, Revision: 1, PrivateData: []byte("r")},
			Params{Revision: 1, CRC: true, LocalIRD: 3, LocalORD: 3, PeerPrivateData: []byte("q")}, nil},
		{"rev 2 without S", Policy{}, Frame{Revision: 2}, Frame{Reply: true, CRC: true, Revision: 2}, Params{Revision: 2, CRC: true}, nil},
		{"S with short pd", Policy{}, Frame{Enhanced: true, Revision: 2, PrivateData: []byte{1}}, Frame{}, Params{}, &iwerr.MPAInvalidReqReply},
		{"enhanced required", Policy{RequireEnhanced: true}, Frame{Revision: 1}, Frame{}, Params{}, &iwerr.MPAInvalidReqReply},
		{"rev 1 responder, rev 2 request", Policy{Revision: 1, CRC: CRCOff}, Frame{Enhanced: true, Revision: 2, PrivateData: enh(Enhanced{IRD: 1})},
			Frame{Reply: true, Revision: 1}, Params{Revision: 1, PeerPrivateData: enh(Enhanced{IRD: 1})}, nil},
		{"crc off, peer asks", Policy{CRC: CRCOff}, Frame{CRC: true, Revision: 1}, Frame{Reply: true, CRC: true, Revision: 1}, Params{Revision: 1, CRC: true}, nil},
		{"crc off, peer does not", Policy{CRC: CRCOff}, Frame{Revision: 1}, Frame{Reply: true, Revision: 1}, Params{Revision: 1}, nil},
		{"crc preferred, peer does not", Policy{}, Frame{Revision: 1}, Frame{Reply: true, CRC: true, Revision: 1}, Params{Revision: 1, CRC: true}, nil},
		{"crc refuse, peer asks", Policy{CRC: CRCRefuse}, Frame{CRC: true, Revision: 1}, Frame{}, Params{}, &iwerr.MPAInvalidReqReply},
		{"markers", Policy{CRC: CRCOff, Markers: true}, Frame{Markers: true, Revision: 1}, Frame{Reply: true, Markers: true, Revision: 1},
			Params{Revision: 1, MarkersRx: true, MarkersTx: true}, nil},
		{"initiator wants markers", Policy{CRC: CRCOff}, Frame{Markers: true, Revision: 1}, Frame{Reply: true, Revision: 1},
			Params{Revision: 1, MarkersTx: true}, nil},
		{"p2p prefers write", Policy{IRD: 1, ORD: 1}, req2(Enhanced{IRD: 1, ORD: 1, PeerToPeer: true, SendRTR: true, WriteRTR: true, ReadRTR: true}),
			Frame{Reply: true, CRC: true, Enhanced: true, Revision: 2, PrivateData: enh(Enhanced{IRD: 1, ORD: 1, PeerToPeer: true, WriteRTR: true})},
			Params{Revision: 2, Enhanced: true, CRC: true, LocalIRD: 1, LocalORD: 1, PeerIRD: 1, PeerORD: 1, PeerToPeer: true, RTR: RTRWrite}, nil},
		{"p2p then read", Policy{}, req2(Enhanced{PeerToPeer: true, SendRTR: true, ReadRTR: true}),
			Frame{Reply: true, CRC: true, Enhanced: true, Revision: 2, PrivateData: enh(Enhanced{PeerToPeer: true, ReadRTR: true})},
			Params{Revision: 2, Enhanced: true, CRC: true, PeerToPeer: true, RTR: RTRRead}, nil},
		{"p2p send when accepted", Policy{RTRTypes: RTRSetSend}, req2(Enhanced{PeerToPeer: true, SendRTR: true, WriteRTR: true}),
			Frame{Reply: true, CRC: true, Enhanced: true, Revision: 2, PrivateData: enh(Enhanced{PeerToPeer: true, SendRTR: true})},
			Params{Revision: 2, Enhanced: true, CRC: true, PeerToPeer: true, RTR: RTRSend}, nil},
		{"p2p send only, not accepted", Policy{}, req2(Enhanced{PeerToPeer: true, SendRTR: true}), Frame{}, Params{}, &iwerr.MPANoMatchingRTR},
		{"p2p nothing offered", Policy{}, req2(Enhanced{PeerToPeer: true}), Frame{}, Params{}, &iwerr.MPANoMatchingRTR},
		{"no p2p, rtr flags ignored", Policy{}, req2(Enhanced{WriteRTR: true}),
			Frame{Reply: true, CRC: true, Enhanced: true, Revision: 2, PrivateData: enh(Enhanced{})},
			Params{Revision: 2, Enhanced: true, CRC: true}, nil},
		{"ird/ord clamped", Policy{IRD: 0xffff, ORD: 0xffff}, req2(Enhanced{IRD: MaxIRDORD, ORD: MaxIRDORD}),
			Frame{Reply: true, CRC: true, Enhanced: true, Revision: 2, PrivateData: enh(Enhanced{IRD: MaxIRDORD, ORD: MaxIRDORD})},
			Params{Revision: 2, Enhanced: true, CRC: true, LocalIRD: MaxIRDORD, LocalORD: MaxIRDORD, PeerIRD: MaxIRDORD, PeerORD: MaxIRDORD}, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rs := NewResponder(tt.policy)
			rep, got, err := rs.HandleRequest(tt.req)
			if tt.term != nil {
				checkNegErr(t, err, *tt.term, true)
				if !rep.Reply || !rep.Reject || rep.Revision == 0 || rep.Revision > 2 {
					t.Fatalf("reject frame %+v", rep)
				}
				wire(t, rep)
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(rep, tt.wantReply) {
				t.Fatalf("reply %+v\nwant  %+v", rep, tt.wantReply)
			}
			if !reflect.DeepEqual(got, tt.want) {
				t.Fatalf("params %+v\nwant   %+v", got, tt.want)
			}
		})
	}
}

func TestResponderReject(t *testing.T) {
	rs := NewResponder(Policy{})
	f := rs.Reject([]byte("busy"))
	if want := (Frame{Reply: true, Reject: true, Revision: 2, PrivateData: []byte("busy")}); !reflect.DeepEqual(f, want) {
		t.Fatalf("%+v", f)
	}
	if f := rs.Reject(make([]byte, 600)); len(f.PrivateData) != MaxPrivateData {
		t.Fatalf("reject pd %d", len(f.PrivateData))
	}
	// After a Rev 1 request the Reject is Rev 1.
	rs = NewResponder(Policy{})
	if _, _, err := rs.HandleRequest(Frame{Revision: 1}); err != nil {
		t.Fatal(err)
	}
	if f := rs.Reject(nil); f.Revision != 1 {
		t.Fatalf("rev %d", f.Revision)
	}
}

func TestPolicyValidate(t *testing.T) {
	good := []Policy{{}, {Revision: 1, PrivateData: make([]byte, 512)}, {PrivateData: make([]byte, 508), IRD: MaxIRDORD}}
	bad := []Policy{{Revision: 3}, {Revision: 1, PeerToPeer: true}, {CRC: 9}, {IRD: MaxIRDORD + 1}, {PrivateData: make([]byte, 509)}, {Revision: 1, PrivateData: make([]byte, 513)}}
	for _, p := range good {
		if err := p.Validate(); err != nil {
			t.Errorf("%+v: %v", p.Revision, err)
		}
	}
	for _, p := range bad {
		if err := p.Validate(); err == nil {
			t.Errorf("rev %d crc %d ird %d pd %d: no error", p.Revision, p.CRC, p.IRD, len(p.PrivateData))
		}
	}
	// Oversized private data is cut so the frame stays valid.
	f := NewInitiator(Policy{PrivateData: make([]byte, 600)}).Request()
	if len(f.PrivateData) != MaxPrivateData {
		t.Fatalf("pd %d", len(f.PrivateData))
	}
}

// TestHandshakeMatrix runs both ends over many policy pairs and checks that
// whenever both succeed they agree.
func TestHandshakeMatrix(t *testing.T) {
	var policies []Policy
	for _, rev := range []uint8{1, 2} {
		for _, crc := range []CRCPolicy{CRCPreferred, CRCRequired, CRCOff, CRCRefuse} {
			for _, m := range []bool{false, true} {
				for _, p2p := range []bool{false, true} {
					for _, rtr := range []RTRSet{0, RTRSetSend, RTRSetRead, RTRSetWrite | RTRSetSend} {
						for _, depth := range []uint16{0, 3} {
							policies = append(policies, Policy{Revision: rev, CRC: crc, Markers: m, PeerToPeer: p2p, RTRTypes: rtr,
								IRD: depth, ORD: 3 - depth, PrivateData: []byte{byte(depth)}, LowerORD: depth == 0})
						}
					}
				}
			}
		}
	}
	agreed := 0
	for _, ip := range policies {
		for _, rp := range policies {
			in, rs := NewInitiator(ip), NewResponder(rp)
			rep, rpar, rerr := rs.HandleRequest(wire(t, in.Request()))
			ipar, ierr := in.HandleReply(wire(t, rep))
			if rerr != nil {
				if !errors.Is(ierr, ErrRejected) {
					t.Fatalf("responder failed (%v) but initiator got %v", rerr, ierr)
				}
				continue
			}
			if ierr != nil {
				var ne *NegotiationError
				if !errors.As(ierr, &ne) || ne.Reject {
					t.Fatalf("initiator error %v", ierr)
				}
				continue
			}
			agreed++
			if ipar.CRC != rpar.CRC || ipar.MarkersTx != rpar.MarkersRx || ipar.MarkersRx != rpar.MarkersTx ||
				ipar.RTR != rpar.RTR || ipar.PeerToPeer != rpar.PeerToPeer || ipar.Revision != rpar.Revision || ipar.Enhanced != rpar.Enhanced {
				t.Fatalf("disagree:\n%+v\n%+v\ninitiator %+v\nresponder %+v", ip, rp, ipar, rpar)
			}
			if ipar.Enhanced && (ipar.LocalORD > rpar.LocalIRD || rpar.LocalORD > ipar.LocalIRD) {
				t.Fatalf("IRD/ORD: initiator %+v responder %+v", ipar, rpar)
			}
			if ipar.CRC != (ip.CRC.asks() || rp.CRC.asks()) {
				t.Fatalf("CRC %t for %d/%d", ipar.CRC, ip.CRC, rp.CRC)
			}
		}
	}
	if agreed == 0 {
		t.Fatal("no pair agreed")
	}
}

func FuzzNegotiate(f *testing.F) {
	f.Add(unhex(f, goldenRequest), (&Frame{Reply: true, CRC: true, Enhanced: true, Revision: 2, PrivateData: []byte{0x80, 0x10, 0x80, 0x10}}).Append(nil), uint16(0x0123))
	f.Add((&Frame{Revision: 1, PrivateData: []byte("x")}).Append(nil), (&Frame{Reply: true, Reject: true, Revision: 1}).Append(nil), uint16(0xffff))
	f.Fuzz(func(t *testing.T, reqb, repb []byte, knobs uint16) {
		p := Policy{
			Revision:        uint8(knobs & 3),
			CRC:             CRCPolicy(knobs >> 2 & 3),
			Markers:         knobs&0x10 != 0,
			PeerToPeer:      knobs&0x20 != 0,
			RTRTypes:        RTRSet(knobs >> 6 & 7),
			IRD:             knobs >> 9 & 7,
			ORD:             knobs >> 12 & 7,
			AcceptRev0:      knobs&0x8000 != 0,
			RequireEnhanced: knobs&0x0100 != 0,
			LowerORD:        knobs&0x4000 != 0,
		}
		if p.Revision == 3 {
			p.Revision = 2
		}
		if req, _, err := ParseFrame(reqb); err == nil {
			rep, par, err := NewResponder(p).HandleRequest(req)
			if got := wire(t, rep); !reflect.DeepEqual(got, rep) && err == nil {
				t.Fatalf("reply does not round trip: %+v", rep)
			}
			if err == nil && (par.RTR != RTRNone) != par.PeerToPeer {
				t.Fatalf("params %+v", par)
			}
			if err != nil && !errors.Is(err, iwerr.MPAInvalidReqReply) && !errors.Is(err, iwerr.MPANoMatchingRTR) {
				t.Fatalf("unexpected error %v", err)
			}
		}
		if rep, _, err := ParseFrame(repb); err == nil {
			in := NewInitiator(p)
			req := in.Request()
			wire(t, req)
			par, err := in.HandleReply(rep)
			if err == nil && par.PeerToPeer && !p.PeerToPeer {
				t.Fatalf("p2p not asked: %+v", par)
			}
		}
	})
}
