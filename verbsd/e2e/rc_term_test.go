package e2e

import (
	"bytes"
	"encoding/binary"
	"testing"

	"github.com/iwarpd/iwarpd/ddp"
	"github.com/iwarpd/iwarpd/iwerr"
	"github.com/iwarpd/iwarpd/proto"
	"github.com/iwarpd/iwarpd/rdmap"
	"github.com/iwarpd/iwarpd/verbsd/rc"
)

// TestRCTerminateSent drives an engine QP (responder) with a raw peer that
// breaks one rule per case, and checks the Terminate the engine sends (the
// RFC 6580 triple, the offending DDP/RDMAP headers and segment length
// (M)), the QP going to ERROR with its receives flushed, the async event
// and the CM callback.
func TestRCTerminateSent(t *testing.T) {
	const size = 1 << 16
	type env struct {
		b        *rcEnd
		noWrite  *rcEnd // same session: an MR without remote rights
		otherPD  uint32
		otherMR  uint32 // an MR of another PD of b's session
		noRights uint32 // an MR of b's PD without remote access
		r        *rawPeer
	}
	readReq := func(rr rdmap.ReadRequest) []byte { return rr.Append(nil) }
	cases := []struct {
		name    string
		ird     uint16
		crc     bool
		markers bool
		run     func(e *env) (ulpdu []byte, rdma []byte) // returns the offending ULPDU's DDP header and RDMAP header
		want    iwerr.Error
		hdrs    bool // D expected
	}{
		{name: "write invalid stag", want: iwerr.DDPInvalidStag, hdrs: true, run: func(e *env) ([]byte, []byte) {
			h := tagged(rdmap.OpWrite, 0x7fff0001, 0, true)
			e.r.send(h, make([]byte, 10))
			return h.Append(nil), nil
		}},
		{name: "write base bounds", want: iwerr.DDPBaseBounds, hdrs: true, run: func(e *env) ([]byte, []byte) {
			h := tagged(rdmap.OpWrite, e.b.mr.RKey, e.b.mr.Addr(size-5), true)
			e.r.send(h, make([]byte, 10))
			return h.Append(nil), nil
		}},
		{name: "write access rights", want: iwerr.RDMAPAccessRights, hdrs: true, run: func(e *env) ([]byte, []byte) {
			h := tagged(rdmap.OpWrite, e.noRights, 0, true)
			h.TO = e.noWrite.mr.Addr(0)
			e.r.send(h, make([]byte, 10))
			return h.Append(nil), nil
		}},
		{name: "write pd mismatch", want: iwerr.DDPStagNotAssociated, hdrs: true, run: func(e *env) ([]byte, []byte) {
			h := tagged(rdmap.OpWrite, e.otherMR, 0, true)
			e.r.send(h, make([]byte, 10))
			return h.Append(nil), nil
		}},
		{name: "read access rights", want: iwerr.RDMAPAccessRights, hdrs: true, run: func(e *env) ([]byte, []byte) {
			h := e.r.untagged(rdmap.OpReadRequest, 0, true)
			rr := readReq(rdmap.ReadRequest{SinkStag: 9, Size: 8, SourceStag: e.noRights, SourceTO: e.noWrite.mr.Addr(0)})
			e.r.send(h, rr)
			return h.Append(nil), rr
		}},
		{name: "read invalid stag", want: iwerr.RDMAPInvalidStag, hdrs: true, run: func(e *env) ([]byte, []byte) {
			h := e.r.untagged(rdmap.OpReadRequest, 0, true)
			rr := readReq(rdmap.ReadRequest{SinkStag: 9, Size: 8, SourceStag: 0x12345678})
			e.r.send(h, rr)
			return h.Append(nil), rr
		}},
		{name: "read base bounds", want: iwerr.RDMAPBaseBounds, hdrs: true, run: func(e *env) ([]byte, []byte) {
			h := e.r.untagged(rdmap.OpReadRequest, 0, true)
			rr := readReq(rdmap.ReadRequest{SinkStag: 9, Size: size + 1, SourceStag: e.b.mr.RKey, SourceTO: e.b.mr.Addr(0)})
			e.r.send(h, rr)
			return h.Append(nil), rr
		}},
		{name: "read pd mismatch", want: iwerr.RDMAPStagNotAssociated, hdrs: true, run: func(e *env) ([]byte, []byte) {
			h := e.r.untagged(rdmap.OpReadRequest, 0, true)
			rr := readReq(rdmap.ReadRequest{SinkStag: 9, Size: 1, SourceStag: e.otherMR})
			e.r.send(h, rr)
			return h.Append(nil), rr
		}},
		{name: "ird exceeded", ird: 1, want: iwerr.DDPInvalidMSNRange, hdrs: true, run: func(e *env) ([]byte, []byte) {
			// Two Read Requests in one write, so that the engine reads
			// the second (in the same receive loop, receive) while the
			// first is still queued: one more than IRD 1. Sent by two
			// writes, the first response could go out (into a 16 MiB
			// socket buffer) before the second request arrived, which
			// is then within IRD: no Terminate (failed 1 CI run in 3).
			var h ddp.Header
			var both []byte
			for range 2 {
				h = e.r.untagged(rdmap.OpReadRequest, 0, true)
				both = append(both, e.r.fpdu(h, readReq(rdmap.ReadRequest{SinkStag: 9, Size: size, SourceStag: e.b.mr.RKey, SourceTO: e.b.mr.Addr(0)}))...)
			}
			e.r.write(both)
			return h.Append(nil), nil
		}},
		{name: "invalid qn", want: iwerr.DDPInvalidQN, hdrs: true, run: func(e *env) ([]byte, []byte) {
			h := e.r.untagged(rdmap.OpSend, 0, true)
			h.QN = 5
			e.r.send(h)
			return h.Append(nil), nil
		}},
		{name: "invalid msn", want: iwerr.DDPInvalidMSNRange, hdrs: true, run: func(e *env) ([]byte, []byte) {
			e.b.postRecv(1, e.b.mr.SGE(0, 100))
			h := e.r.untagged(rdmap.OpSend, 0, true)
			h.MSN = 7
			e.r.send(h, []byte("x"))
			return h.Append(nil), nil
		}},
		{name: "invalid mo", want: iwerr.DDPInvalidMO, hdrs: true, run: func(e *env) ([]byte, []byte) {
			e.b.postRecv(1, e.b.mr.SGE(0, 100))
			h := e.r.untagged(rdmap.OpSend, 4, true)
			e.r.send(h, []byte("x"))
			return h.Append(nil), nil
		}},
		{name: "message too long", want: iwerr.DDPMessageTooLong, hdrs: true, run: func(e *env) ([]byte, []byte) {
			e.b.postRecv(1, e.b.mr.SGE(0, 10))
			h := e.r.untagged(rdmap.OpSend, 0, true)
			e.r.send(h, make([]byte, 11))
			return h.Append(nil), nil
		}},
		{name: "no buffer", want: iwerr.DDPInvalidMSNNoBuffer, hdrs: true, run: func(e *env) ([]byte, []byte) {
			e.r.send(e.r.untagged(rdmap.OpSend, 0, true), []byte("x")) // takes the one receive posted
			h := e.r.untagged(rdmap.OpSend, 0, true)
			e.r.send(h, []byte("no receive posted"))
			return h.Append(nil), nil
		}},
		{name: "unexpected opcode tagged send", want: iwerr.RDMAPUnexpectedOpcode, hdrs: true, run: func(e *env) ([]byte, []byte) {
			h := tagged(rdmap.OpSend, e.b.mr.RKey, e.b.mr.Addr(0), true)
			e.r.send(h, []byte("x"))
			return h.Append(nil), nil
		}},
		{name: "unexpected read response", want: iwerr.RDMAPUnexpectedOpcode, hdrs: true, run: func(e *env) ([]byte, []byte) {
			h := tagged(rdmap.OpReadResponse, e.b.mr.RKey, e.b.mr.Addr(0), true)
			e.r.send(h, []byte("x"))
			return h.Append(nil), nil
		}},
		{name: "unsupported opcode", want: iwerr.RDMAPUnexpectedOpcode, hdrs: true, run: func(e *env) ([]byte, []byte) {
			h := e.r.untagged(rdmap.OpSend, 0, true)
			h.ULPControl = uint8(rdmap.MakeControl(rdmap.Opcode(0xd))) // undefined (RFC 7306 took 0x8-0xb)
			e.r.send(h, make([]byte, 8))
			return h.Append(nil), nil
		}},
		{name: "ddp version", want: iwerr.DDPUntaggedInvalidVersion, run: func(e *env) ([]byte, []byte) {
			h := e.r.untagged(rdmap.OpSend, 0, true)
			h.Version = 2
			e.r.send(h)
			return nil, nil
		}},
		{name: "ddp tagged version", want: iwerr.DDPTaggedInvalidVersion, run: func(e *env) ([]byte, []byte) {
			h := tagged(rdmap.OpWrite, e.b.mr.RKey, e.b.mr.Addr(0), true)
			h.Version = 0
			e.r.send(h, []byte("x"))
			return nil, nil
		}},
		{name: "rdmap version", want: iwerr.RDMAPInvalidVersion, hdrs: true, run: func(e *env) ([]byte, []byte) {
			e.b.postRecv(1, e.b.mr.SGE(0, 100))
			h := e.r.untagged(rdmap.OpSend, 0, true)
			h.ULPControl = 2<<6 | uint8(rdmap.OpSend)
			e.r.send(h, []byte("x"))
			return h.Append(nil), nil
		}},
		{name: "cannot invalidate", want: iwerr.RDMAPCannotInvalidate, hdrs: true, run: func(e *env) ([]byte, []byte) {
			e.b.postRecv(1, e.b.mr.SGE(0, 100))
			h := e.r.untagged(rdmap.OpSendInvalidate, 0, true)
			h.ULPReserved = e.otherMR // another PD's STag
			e.r.send(h, []byte("x"))
			return h.Append(nil), nil
		}},
		{name: "crc error", crc: true, want: iwerr.MPACRCError, run: func(e *env) ([]byte, []byte) {
			e.b.postRecv(1, e.b.mr.SGE(0, 100))
			b := e.r.fpdu(e.r.untagged(rdmap.OpSend, 0, true), []byte("corrupted"))
			b[len(b)-1] ^= 0x55
			e.r.write(b)
			return nil, nil
		}},
		{name: "marker mismatch", markers: true, want: iwerr.MPAMarkerMismatch, run: func(e *env) ([]byte, []byte) {
			e.b.postRecv(1, e.b.mr.SGE(0, 100))
			b := e.r.fpdu(e.r.untagged(rdmap.OpSend, 0, true), []byte("marker"))
			binary.BigEndian.PutUint16(b[2:4], 3) // the first marker's FPDUPTR must be 0
			e.r.write(b)
			return nil, nil
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			srv, path := rcServer(t)
			e := &env{}
			e.b = newRCEnd(t, srv, path, rcOpts{bufSize: size})
			e.noWrite = newRCEnd(t, srv, path, rcOpts{bufSize: 4096, access: proto.AccessLocalWrite, c: e.b.c, pd: e.b.pd})
			e.noRights = e.noWrite.mr.RKey
			var err error
			if e.otherPD, err = e.b.c.AllocPD(); err != nil {
				t.Fatal(err)
			}
			m, err := e.b.c.RegMR(e.otherPD, 4096, proto.AccessLocalWrite|proto.AccessRemoteWrite|proto.AccessRemoteRead)
			if err != nil {
				t.Fatal(err)
			}
			e.otherMR = m.RKey
			p, _ := rcParams(tc.crc, tc.markers, max(tc.ird, 1), 4)
			e.r = connectRaw(t, e.b, p, false, 0)
			e.b.postRecv(77, e.b.mr.SGE(size-100, 10)) // flushed at the end (or consumed)
			ddpHdr, rdmaHdr := tc.run(e)
			h, term := e.r.terminate()
			if h.Tagged || h.QN != rdmap.QNTerminate || h.MSN != 1 || !h.Last || h.MO != 0 ||
				rdmap.Control(h.ULPControl) != rdmap.MakeControl(rdmap.OpTerminate) {
				t.Fatalf("Terminate DDP header %+v", h)
			}
			if term.Err != tc.want {
				t.Fatalf("Terminate %v, want %v", term.Err, tc.want)
			}
			if term.SiwLayout || term.Reserved != 0 {
				t.Fatalf("Terminate not in RFC layout: %+v", term)
			}
			if term.DDPHeaderIncluded != tc.hdrs {
				t.Fatalf("D = %v, want %v", term.DDPHeaderIncluded, tc.hdrs)
			}
			if tc.hdrs {
				if !bytes.Equal(term.DDPHeader, ddpHdr) {
					t.Fatalf("terminated DDP header\n% x, want\n% x", term.DDPHeader, ddpHdr)
				}
				if !term.SegLenValid || int(term.DDPSegmentLength) < len(ddpHdr) {
					t.Fatalf("segment length %v %d", term.SegLenValid, term.DDPSegmentLength)
				}
			}
			if term.RDMAPHeaderIncluded != (rdmaHdr != nil) || !bytes.Equal(term.RDMAPHeader, rdmaHdr) {
				t.Fatalf("R = %v, header % x, want % x", term.RDMAPHeaderIncluded, term.RDMAPHeader, rdmaHdr)
			}
			e.r.expectEOF() // the engine sends its FIN after the Terminate
			e.r.conn.Close()
			e.b.waitState(proto.QPStateError)
			if r, tm := e.b.waitClosed(); r != rc.ClosedTermSent || tm == nil || tm.Err != tc.want {
				t.Fatalf("onRCClosed(%v, %+v)", r, tm)
			}
			// The receive still posted is flushed.
			for _, c := range e.b.rcq.Wait(2, 200*1e6) {
				if c.WRID == 77 && c.Status != proto.WCWRFlushErr && tc.want != iwerr.DDPInvalidMSNNoBuffer {
					t.Fatalf("posted receive: %+v", c)
				}
			}
		})
	}
}
