package integration

import (
	"fmt"
	"testing"
	"time"

	"github.com/iwarpd/iwarpd/iwerr"
	"github.com/iwarpd/iwarpd/ofverbs"
	"github.com/iwarpd/iwarpd/test/daemontest"
)

// TestRCAccessViolations: remote access violations over RC, each on its own
// connection, captured on lo: an RDMA Write to an STag that does not exist,
// a Write beyond the end of the MR, an RDMA Read of an MR without remote
// read access, a Write to an STag the responder invalidated locally. The
// responder sends a Terminate with the RFC 5040/5041 code (checked on the
// wire with package dissect, and by tshark and iwarpdump -strict), its QP
// goes to ERROR with an access-error async event and its posted receive is
// flushed; the requester's work request completes with a remote access
// error carrying the code, and its QP goes to ERROR too.
func TestRCAccessViolations(t *testing.T) {
	da, db := startRCDaemons(t, "rcviol", daemontest.Options{})
	port := freeTCPPort(t)
	capt := startCapture(t, port)
	ctxA := da.Open(t, "viol-server")
	l := listenOn(t, ctxA, port)
	cases := []struct {
		name   string
		access ofverbs.Access
		want   iwerr.Error
		// bad returns the offending work request (ID 1).
		bad func(srv, cli *rcEP, deadStag uint32) ofverbs.SendWR
	}{
		{"write-invalid-stag", rcAccessAll, iwerr.DDPInvalidStag, func(srv, cli *rcEP, _ uint32) ofverbs.SendWR {
			return ofverbs.SendWR{Opcode: ofverbs.WRRDMAWrite, SGL: []ofverbs.SGE{cli.mr.SGE(cli.src()[:100])},
				RKey: 0x7fff0000 | srv.mr.RKey()&0xff, RemoteAddr: srv.mr.Addr()}
		}},
		{"write-beyond-bounds", rcAccessAll, iwerr.DDPBaseBounds, func(srv, cli *rcEP, _ uint32) ofverbs.SendWR {
			return ofverbs.SendWR{Opcode: ofverbs.WRRDMAWrite, SGL: []ofverbs.SGE{cli.mr.SGE(cli.src()[:4096])},
				RKey: srv.mr.RKey(), RemoteAddr: srv.mr.Addr() + uint64(len(srv.mem)) - 100}
		}},
		{"read-without-remote-read", ofverbs.AccessLocalWrite | ofverbs.AccessRemoteWrite, iwerr.RDMAPAccessRights,
			func(srv, cli *rcEP, _ uint32) ofverbs.SendWR {
				return ofverbs.SendWR{Opcode: ofverbs.WRRDMARead, SGL: []ofverbs.SGE{cli.mr.SGE(cli.dst()[:256])},
					RKey: srv.mr.RKey(), RemoteAddr: srv.mr.Addr()}
			}},
		{"write-without-remote-write", ofverbs.AccessLocalWrite | ofverbs.AccessRemoteRead, iwerr.RDMAPAccessRights,
			func(srv, cli *rcEP, _ uint32) ofverbs.SendWR {
				return ofverbs.SendWR{Opcode: ofverbs.WRRDMAWrite, SGL: []ofverbs.SGE{cli.mr.SGE(cli.src()[:100])},
					RKey: srv.mr.RKey(), RemoteAddr: srv.mr.Addr()}
			}},
		{"write-invalidated-stag", rcAccessAll, iwerr.DDPInvalidStag, func(srv, cli *rcEP, dead uint32) ofverbs.SendWR {
			return ofverbs.SendWR{Opcode: ofverbs.WRRDMAWrite, SGL: []ofverbs.SGE{cli.mr.SGE(cli.src()[:64])},
				RKey: dead, RemoteAddr: srv.mr.SGE(srv.scratch()[2048:]).Addr}
		}},
	}
	for i, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			// The listener's session serves every case (events are told
			// apart by QP handle); a fresh client session each time.
			srv := newRCEP(t, "server", ctxA, 4096, c.access)
			cli := newRCEP(t, "client", db.Open(t, fmt.Sprintf("viol-client-%d", i)), 4096, rcAccessAll)
			rcConnectOn(t, l, srv, cli)
			// A healthy exchange first.
			if err := rcSend(cli, srv, 10, 60, sendKind{}); err != nil {
				t.Fatal(err)
			}
			if err := srv.postRecv(51, srv.dst()[:1024]); err != nil {
				t.Fatal(err)
			}
			var dead uint32
			if c.name == "write-invalidated-stag" {
				var err error
				if dead, err = rcLocalInvalidate(srv, 70); err != nil {
					t.Fatal(err)
				}
			}
			wr := c.bad(srv, cli, dead)
			wr.ID, wr.Signaled = 1, true
			wrs := []ofverbs.SendWR{wr}
			if wr.Opcode == ofverbs.WRRDMAWrite {
				// A Read behind the Write: outstanding when the Terminate
				// comes (a Write may complete before).
				wrs = append(wrs, ofverbs.SendWR{ID: 2, Opcode: ofverbs.WRRDMARead, Signaled: true,
					SGL: []ofverbs.SGE{cli.mr.SGE(cli.dst()[:16])}, RKey: srv.mr.RKey(), RemoteAddr: srv.mr.Addr()})
			}
			if n, err := cli.qp.PostSend(wrs); n != len(wrs) {
				t.Fatalf("post: %d, %v", n, err)
			}
			// Requester: one completion per work request, at least one
			// a remote access error with the Terminate's code, the
			// others successful (a Write already sent) or flushed.
			wantTerm := uint32(c.want.Layer)<<16 | uint32(c.want.Type)<<8 | uint32(c.want.Code)
			remoteErr := 0
			for k := range wrs {
				wc, err := cli.pollWC(cli.scq, 10*time.Second)
				if err != nil {
					t.Fatalf("requester completion %d: %v", k, err)
				}
				switch {
				case wc.ID != uint64(k+1):
					t.Errorf("requester completion %+v, want ID %d", wc, k+1)
				case wc.Status == ofverbs.WCRemAccessErr:
					remoteErr++
					if wc.Flags&ofverbs.WCFlagTermValid == 0 || wc.Term != wantTerm {
						t.Errorf("requester completion %+v: Term %#x, want %#x (%v)", wc, wc.Term, wantTerm, c.want)
					}
				case wc.Status == ofverbs.WCSuccess && k == 0 && remoteErr == 0 && wr.Opcode == ofverbs.WRRDMAWrite:
				case wc.Status == ofverbs.WCWRFlushErr && remoteErr > 0:
				default:
					t.Errorf("requester completion %+v (%v)", wc, wc.Err())
				}
			}
			if remoteErr != 1 {
				t.Errorf("%d remote access errors at the requester, want 1", remoteErr)
			}
			if err := waitQPState(cli, ofverbs.QPStateError, 10*time.Second); err != nil {
				t.Error(err)
			}
			if _, err := waitAsync(cli, ofverbs.EventQPFatal, 10*time.Second); err != nil {
				t.Error(err)
			}
			// Responder: ERROR, an access-error event, the receive flushed.
			if err := waitQPState(srv, ofverbs.QPStateError, 10*time.Second); err != nil {
				t.Error(err)
			}
			if ev, err := waitAsync(srv, ofverbs.EventQPAccessError, 10*time.Second); err != nil {
				t.Error(err)
			} else {
				t.Logf("responder event: %v", ev)
			}
			if wc, err := srv.pollWC(srv.rcq, 10*time.Second); err != nil || wc.ID != 51 || wc.Status != ofverbs.WCWRFlushErr {
				t.Errorf("responder receive: %+v (%v), want ID 51 flushed", wc, err)
			}
			for _, e := range []*rcEP{cli, srv} {
				if ev, err := waitCM(e, ofverbs.CMDisconnected, 10*time.Second); err != nil {
					t.Error(err)
				} else if e == srv && ev.Errno == 0 {
					t.Logf("%s: disconnected %+v", e.name, ev)
				}
			}
		})
	}
	pcap := capt.stop(t)
	evs := checkConformance(t, pcap, 2, true, len(cases))
	// On the wire: one Terminate per case, from the responder, in order,
	// with the exact codes.
	var got []iwerr.Error
	for _, e := range evs {
		if e.RDMAP == nil || e.RDMAP.Terminate == nil {
			continue
		}
		tm := e.RDMAP.Terminate
		if e.Src != l.Addr().String() {
			t.Errorf("frame %d: a Terminate from %s, want from the responder %v", e.Frame, e.Src, l.Addr())
		}
		if tm.SiwLayout || e.DDP == nil || e.DDP.QN == nil || *e.DDP.QN != 2 || !e.DDP.Last {
			t.Errorf("frame %d: Terminate %+v DDP %+v", e.Frame, tm, e.DDP)
		}
		got = append(got, iwerr.Error{Layer: iwerr.Layer(tm.Layer), Type: tm.EType, Code: tm.ECode})
	}
	if len(got) != len(cases) {
		t.Fatalf("%d Terminates on the wire (%v), want %d", len(got), got, len(cases))
	}
	for i, c := range cases {
		if got[i] != c.want {
			t.Errorf("%s: Terminate %d/%d/%#02x (%v), want %d/%d/%#02x (%v)", c.name, got[i].Layer, got[i].Type, got[i].Code, got[i],
				c.want.Layer, c.want.Type, c.want.Code, c.want)
		}
	}
	da.CheckAlive(t)
	db.CheckAlive(t)
}

// rcConnectOn connects with the device's MPA defaults.
func rcConnectOn(t *testing.T, l *ofverbs.Listener, srv, cli *rcEP) {
	t.Helper()
	rcConnect(t, l, srv, cli, ofverbs.MPAOptions{})
}
