package rc

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/iwarpd/iwarpd/ddp"
	"github.com/iwarpd/iwarpd/internal/crc32c"
	"github.com/iwarpd/iwarpd/iwerr"
	"github.com/iwarpd/iwarpd/mpa"
	"github.com/iwarpd/iwarpd/proto"
	"github.com/iwarpd/iwarpd/rdmap"
	"github.com/iwarpd/iwarpd/verbsd/config"
	"golang.org/x/sys/unix"
)

func unhex(t testing.TB, s string) []byte {
	t.Helper()
	b, err := hex.DecodeString(strings.ReplaceAll(s, " ", ""))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// rejectReply is the Reject Reply of a Rev 2 responder without private
// data: key, flags R (0x20), Rev 2, PD_Length 0.
const rejectReply = "4d504120494420526570204672616d65 20 02 0000"

func TestTerminateFPDU(t *testing.T) {
	for _, tc := range []struct {
		term iwerr.Error
		crc  bool
	}{{iwerr.MPAInsufficientIRD, true}, {iwerr.MPANoMatchingRTR, false}, {iwerr.MPAInvalidReqReply, true}} {
		b := terminateFPDU(tc.term, tc.crc, false)
		// ULPDU_Length 22, untagged DDP L=1 DV=1, RDMAP RV=1 opcode 7,
		// RsvdULP 0, QN 2, MSN 1, MO 0, Terminate Layer 2 EType 0 ECode,
		// no flags; no pad (2+22 = 24); CRC.
		want := unhex(t, fmt.Sprintf("0016 41 47 00000000 00000002 00000001 00000000 20 %02x 0000", tc.term.Code))
		if len(b) != len(want)+4 || !bytes.Equal(b[:len(want)], want) {
			t.Fatalf("%v: FPDU\n% x\nwant\n% x + CRC", tc.term, b, want)
		}
		var sum uint32
		if tc.crc {
			sum = crc32c.Checksum(want)
		}
		if got := binary.LittleEndian.Uint32(b[len(want):]); got != sum {
			t.Errorf("%v: CRC %#08x, want %#08x", tc.term, got, sum)
		}
		f, err := mpa.ParseFPDU(b, 0, tc.crc, false)
		if err != nil || f.Err() != nil {
			t.Fatalf("ParseFPDU: %v %v", err, f.Err())
		}
		h, n, err := ddp.Parse(f.ULPDU)
		if err != nil || h.Tagged || h.QN != rdmap.QNTerminate || h.MSN != 1 || !h.Last ||
			rdmap.Control(h.ULPControl).Opcode() != rdmap.OpTerminate {
			t.Fatalf("DDP header %+v, %v", h, err)
		}
		term, _, err := rdmap.ParseTerminate(f.ULPDU[n:])
		if err != nil || term.Err != tc.term || term.DDPHeaderIncluded || term.SiwLayout {
			t.Errorf("Terminate %+v, %v; want %v", term, err, tc.term)
		}
	}
}

func TestJudgeRequest(t *testing.T) {
	policy := responderPolicy(config.MPAConfig{RTR: proto.RTRWrite | proto.RTRRead | proto.RTRSend}, nil, 0, 0)
	for _, tc := range []struct {
		name   string
		in     string
		reject string // "" = no answer
		ok     bool
		check  func(mpa.Params) error
	}{
		// protocol-notes §A.1 golden Request: Rev 2, C+S, P2P, Write RTR, IRD=ORD=16.
		{name: "golden rev2 p2p", in: "4d504120494420526571204672616d65 50 02 0004 80108010", ok: true, check: func(p mpa.Params) error {
			if !p.Enhanced || !p.PeerToPeer || p.RTR != mpa.RTRWrite || p.PeerIRD != 16 || p.PeerORD != 16 {
				return fmt.Errorf("params %+v", p)
			}
			return nil
		}},
		{name: "rev1 with private data", in: "4d504120494420526571204672616d65 40 01 0003 616263", ok: true, check: func(p mpa.Params) error {
			if p.Enhanced || string(p.PeerPrivateData) != "abc" {
				return fmt.Errorf("params %+v", p)
			}
			return nil
		}},
		{name: "garbage", in: "474554202f20485454502f312e310d0a486f7374", reject: rejectReply},
		{name: "rev 7", in: "4d504120494420526571204672616d65 40 07 0000", reject: rejectReply},
		{name: "PD_Length 600", in: "4d504120494420526571204672616d65 40 02 0258", reject: rejectReply},
		{name: "reply key", in: "4d504120494420526570204672616d65 40 02 0000", reject: rejectReply},
		{name: "S without block", in: "4d504120494420526571204672616d65 50 02 0002 0000", reject: rejectReply},
		{name: "rev1 request gets rev1 reject", in: "4d504120494420526571204672616d65 60 01 0000",
			reject: "4d504120494420526570204672616d65 20 01 0000"},
		{name: "truncated", in: "4d504120494420526571204672"},
		{name: "truncated private data", in: "4d504120494420526571204672616d65 50 02 0010 8010"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			buf := make([]byte, mpa.FrameHeaderLen+mpa.MaxPrivateData)
			f, rerr := readFrame(bytes.NewReader(unhex(t, tc.in)), buf)
			p, reject, err := judgeRequest(policy, f, rerr)
			if tc.ok {
				if err != nil || reject != nil {
					t.Fatalf("err %v, reject % x", err, reject)
				}
				if err := tc.check(p); err != nil {
					t.Fatal(err)
				}
				return
			}
			if err == nil {
				t.Fatal("accepted")
			}
			want := []byte(nil)
			if tc.reject != "" {
				want = unhex(t, tc.reject)
			}
			if !bytes.Equal(reject, want) {
				t.Errorf("reject\n% x\nwant\n% x", reject, want)
			}
		})
	}
}

func FuzzJudgeRequest(f *testing.F) {
	for _, s := range []string{
		"4d504120494420526571204672616d65 50 02 0004 80108010",
		"4d504120494420526571204672616d65 40 01 0003 616263",
		"4d504120494420526571204672616d65 d0 02 0008 c0104010 01020304",
		"4d504120494420526571204672616d65 40 07 0000",
	} {
		b, _ := hex.DecodeString(strings.ReplaceAll(s, " ", ""))
		f.Add(b)
	}
	policy := responderPolicy(config.MPAConfig{}, nil, 0, 0)
	f.Fuzz(func(t *testing.T, in []byte) {
		buf := make([]byte, mpa.FrameHeaderLen+mpa.MaxPrivateData)
		r := bytes.NewReader(in)
		fr, rerr := readFrame(r, buf)
		if consumed := len(in) - r.Len(); consumed > mpa.FrameHeaderLen+mpa.MaxPrivateData {
			t.Fatalf("read %d octets", consumed)
		}
		p, reject, err := judgeRequest(policy, fr, rerr)
		switch {
		case err == nil && reject != nil:
			t.Fatal("accepted with a reject")
		case reject != nil:
			rf, n, perr := mpa.ParseFrame(reject)
			if perr != nil || n != len(reject) || !rf.Reply || !rf.Reject {
				t.Fatalf("reject % x: %+v %v", reject, rf, perr)
			}
		case err == nil:
			if len(p.PeerPrivateData) > mpa.MaxPrivateData {
				t.Fatalf("private data of %d", len(p.PeerPrivateData))
			}
			// A valid Request is accepted by Accept's responder too.
			if _, _, err := mpa.NewResponder(responderPolicy(config.MPAConfig{}, []byte("x"), 4, 4)).HandleRequest(fr); err != nil {
				t.Fatalf("Accept would fail: %v", err)
			}
		}
	})
}

func TestMPAConfigPolicies(t *testing.T) {
	dev := config.MPAConfig{PeerToPeer: true, IRD: 8}
	p := initiatorPolicy(dev, proto.MPAOptions{}, []byte("pd"), 0, 0)
	if p.Revision != 0 || !p.PeerToPeer || p.IRD != 8 || p.ORD != config.DefaultIRDORD || p.CRC != mpa.CRCPreferred || p.Validate() != nil {
		t.Errorf("device defaults: %+v", p)
	}
	p = initiatorPolicy(dev, proto.MPAOptions{Revision: 1, CRC: proto.MPACRCOff, Markers: proto.ToggleOn}, nil, 3, 5)
	if p.Revision != 1 || p.PeerToPeer || p.CRC != mpa.CRCOff || !p.Markers || p.IRD != 3 || p.ORD != 5 || p.Validate() != nil {
		t.Errorf("rev 1 override: %+v", p)
	}
	p = initiatorPolicy(config.MPAConfig{}, proto.MPAOptions{Revision: 1, PeerToPeer: proto.ToggleOn}, nil, 0, 0)
	if p.Validate() == nil {
		t.Error("explicit peer-to-peer on Rev 1 validated")
	}
	p = initiatorPolicy(config.MPAConfig{}, proto.MPAOptions{PeerToPeer: proto.ToggleOn, RTR: proto.RTRSend}, nil, 0, 0)
	if !p.PeerToPeer || p.RTRTypes != mpa.RTRSetSend {
		t.Errorf("RTR send: %+v", p)
	}
	for _, bad := range []config.MPAConfig{{Revision: 3}, {CRC: 9}, {PeerToPeer: true, Revision: 1}, {RTR: 8}, {IRD: 129}, {Timeout: -1}} {
		if bad.Validate() == nil {
			t.Errorf("%+v validated", bad)
		}
	}
	if (config.MPAConfig{}).TimeoutOrDefault() != config.DefaultMPATimeout {
		t.Error("default timeout")
	}
}

func TestDialEvent(t *testing.T) {
	// A closed port on loopback: connection refused.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	_, err = (&net.Dialer{Timeout: time.Second}).DialContext(context.Background(), "tcp", addr)
	if ev := dialEvent(context.Background(), err); ev.Type != proto.CMUnreachable || ev.Status != int(unix.ECONNREFUSED) {
		t.Errorf("refused: %+v (%v)", ev, err)
	}
	for _, e := range []error{os.ErrDeadlineExceeded, &net.OpError{Op: "dial", Err: unix.ETIMEDOUT}, context.DeadlineExceeded} {
		if ev := dialEvent(context.Background(), e); ev.Type != proto.CMTimedOut || ev.Status != int(unix.ETIMEDOUT) {
			t.Errorf("%v: %+v", e, ev)
		}
	}
	if ev := dialEvent(context.Background(), &net.OpError{Op: "dial", Err: unix.ENETUNREACH}); ev.Type != proto.CMUnreachable ||
		ev.Status != int(unix.ENETUNREACH) {
		t.Errorf("unreachable: %+v", ev)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if ev := dialEvent(ctx, errors.New("x")); ev.Type != proto.CMConnectionError || ev.Status != int(unix.ECANCELED) {
		t.Errorf("cancelled: %+v", ev)
	}
}
