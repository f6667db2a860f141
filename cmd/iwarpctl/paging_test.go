package main

import (
	"encoding/json"
	"testing"

	"github.com/iwarpd/iwarpd/proto"
	"github.com/iwarpd/iwarpd/test/daemontest"
)

// Ports of TestPagedInspect: UD ports 28000-28399 (one per queue pair).
const pagedUDPorts = "28000-28399"

// TestPagedInspect fills a real daemon with more state than one control
// message holds (2 sessions of 160 UD queue pairs; ~75 queue pairs already
// exceed proto.MaxMessage) and checks that iwarpctl fetches every page:
// all 320 queue pairs are listed once, with their addresses. Before
// OpInspect was paged, the daemon could not send the reply and iwarpctl
// timed out.
func TestPagedInspect(t *testing.T) {
	ctl := daemontest.Bins["iwarpctl"]
	sock := daemontest.Start(t, "iwarpd", daemontest.Options{Ports: pagedUDPorts, Addr: "127.0.0.1", Extra: []string{"-max-qp", "200"}}).Sock

	const perSession = 160
	want := map[string]bool{}
	for range 2 {
		s := openRawSession(t, sock) // one QP already
		want[s.qpAddr] = true
		for range perSession - 1 {
			want[s.createUDQP(t)] = true
		}
	}
	if len(want) != 2*perSession {
		t.Fatalf("%d distinct QP addresses, want %d", len(want), 2*perSession)
	}

	checkBodylessInspect(t, sock)

	out, stderr, code := runCtl(t, ctl, "-socket", sock, "-json", "qps")
	if code != 0 {
		t.Fatalf("qps -json: exit %d, stderr %q", code, stderr)
	}
	if len(out) <= proto.MaxMessage {
		t.Errorf("the state is only %d octets of JSON; the test needs more than %d", len(out), proto.MaxMessage)
	}
	var qps []qpRow
	if err := json.Unmarshal([]byte(out), &qps); err != nil {
		t.Fatalf("%v: %.300s", err, out)
	}
	t.Logf("iwarpctl listed %d QPs in %d octets of JSON (one control message holds %d)", len(qps), len(out), proto.MaxMessage)
	seen := map[string]int{}
	for _, q := range qps {
		seen[q.Addr]++
	}
	for addr := range want {
		if seen[addr] != 1 {
			t.Errorf("QP %s listed %d times", addr, seen[addr])
		}
	}
	if len(qps) != len(want) {
		t.Errorf("%d QPs listed, want %d", len(qps), len(want))
	}

	// The merged sessions keep their other objects and counts.
	out, stderr, code = runCtl(t, ctl, "-socket", sock, "-json")
	if code != 0 {
		t.Fatalf("status -json: exit %d, stderr %q", code, stderr)
	}
	var in proto.Inspect
	if err := json.Unmarshal([]byte(out), &in); err != nil {
		t.Fatalf("%v: %.300s", err, out)
	}
	if len(in.Sessions) != 2 || in.More || in.Next != nil {
		t.Fatalf("%d sessions (more %v, next %v), want 2 whole ones", len(in.Sessions), in.More, in.Next)
	}
	for _, s := range in.Sessions {
		if len(s.QPs) != perSession || len(s.CQs) != 1 || len(s.MRs) != 1 || s.PDs != 1 {
			t.Errorf("session %d: %d QPs, %d CQs, %d MRs, %d PDs", s.ID, len(s.QPs), len(s.CQs), len(s.MRs), s.PDs)
		}
	}
}

// checkBodylessInspect sends OpInspect without a body, as clients before
// paging do, and checks that the daemon answers with the first page only,
// marked More, within one control message.
func checkBodylessInspect(t *testing.T, sock string) {
	t.Helper()
	conn, err := proto.Dial(sock)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if err := call(conn, proto.OpHello, 1, proto.HelloRequest{ABI: proto.ABIVersion, Client: "old-ctl", Inspect: true}, nil); err != nil {
		t.Fatal(err)
	}
	if err := conn.Send(proto.Header{Version: proto.ABIVersion, Op: proto.OpInspect, Seq: 2}, nil); err != nil {
		t.Fatal(err)
	}
	h, body, _, err := conn.Receive()
	if err != nil || h.Status != 0 {
		t.Fatalf("bodyless inspect: %v, status %v", err, h.Status)
	}
	var page proto.Inspect
	if err := proto.Unmarshal(body, &page); err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, s := range page.Sessions {
		n += len(s.QPs)
	}
	if !page.More || page.Next == nil || n == 0 || n >= 320 {
		t.Errorf("first page: more %v, next %v, %d QPs (want some, not all)", page.More, page.Next, n)
	}
}
