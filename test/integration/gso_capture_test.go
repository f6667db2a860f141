package integration

import (
	"context"
	"encoding/binary"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/iwarpd/iwarpd/dissect"
	"github.com/iwarpd/iwarpd/ofverbs"
	"github.com/iwarpd/iwarpd/test/conformance"
	"github.com/iwarpd/iwarpd/test/daemontest"
)

// RD ports of TestGSOCaptureAtSender (19740-19759: see TestRDTwoDaemons
// for why RD tests of this package live in 19600-19999).
const (
	gsoPortsA = "19740-19749"
	gsoPortsB = "19750-19759"
)

// TestGSOCaptureAtSender (issue 19 item 9): a capture taken on the sending
// host — loopback, where the kernel hands the capture the datagram before
// it would be segmented — of two daemons exchanging RD Sends (many
// datagrams of equal size: UDP GSO runs) and atomics (an Atomic Response
// and the ACK after it share one sendmsg) holds GSO super-packets.
// iwarpdump splits each into its datagrams: the capture decodes with no
// violation (-strict), and the super-packets are marked.
func TestGSOCaptureAtSender(t *testing.T) {
	flags := []string{"-gso", "true", "-datagram-size", "1472"}
	da := startDaemon(t, "gso-a", daemontest.Options{Extra: append([]string{"-rd-ports", gsoPortsA}, flags...)})
	db := startDaemon(t, "gso-b", daemontest.Options{Extra: append([]string{"-rd-ports", gsoPortsB}, flags...)})
	port := freeTCPPort(t) // the capture's probes and end marker
	capt := startCaptureFilter(t, port, fmt.Sprintf("tcp port %d or udp portrange 19740-19759", port))

	a := newRDEnd(t, "a", da.Open(t, "gso-a"), 1<<20)
	b := newRDEnd(t, "b", db.Open(t, "gso-b"), 1<<20)
	ahAB, err := a.pd.CreateAHTo(b.qp.Endpoint())
	if err != nil {
		t.Fatal(err)
	}
	ahBA, err := b.pd.CreateAHTo(a.qp.Endpoint())
	if err != nil {
		t.Fatal(err)
	}
	for i, n := range []int{0, 100, 1400, 5000, 65536, 300000} {
		b.recv(t, uint64(i), 1<<20)
		if st := rdSendOnce(t, a, b, ahAB, uint64(i), n); st != ofverbs.WCSuccess {
			t.Fatalf("a->b send of %d octets: %v", n, st)
		}
		a.recv(t, uint64(i), 1<<20)
		if st := rdSendOnce(t, b, a, ahBA, uint64(i), n); st != ofverbs.WCSuccess {
			t.Fatalf("b->a send of %d octets: %v", n, st)
		}
	}
	// Atomics from a on a word of b: FetchAdd and CmpSwap, one at a time.
	target, err := b.pd.RegMR(b.mem[1<<19:1<<19+4096], ofverbs.AccessLocalWrite|ofverbs.AccessRemoteAtomic)
	if err != nil {
		t.Fatal(err)
	}
	word := b.mem[1<<19 : 1<<19+8]
	binary.NativeEndian.PutUint64(word, 1000)
	want := uint64(1000)
	for i := range 20 {
		wr := ofverbs.SendWR{ID: uint64(100 + i), Opcode: ofverbs.WRFetchAdd, AH: ahAB, Signaled: true, RKey: target.RKey(),
			RemoteAddr: target.Addr(), CompareAdd: 3, SGL: []ofverbs.SGE{a.mr.SGE(a.mem[:8])}}
		if i%2 == 1 {
			wr.Opcode, wr.CompareAdd, wr.Swap = ofverbs.WRCmpSwap, want, want+5
		}
		a.post(t, wr)
		wc, err := a.wait(a.scq, 20*time.Second)
		if err != nil || wc.Status != ofverbs.WCSuccess {
			t.Fatalf("atomic %d: %+v %v", i, wc, err)
		}
		if got := binary.NativeEndian.Uint64(a.mem[:8]); got != want {
			t.Fatalf("atomic %d fetched %d, want %d", i, got, want)
		}
		if i%2 == 1 {
			want += 5
		} else {
			want += 3
		}
	}
	pcap := capt.stop(t)
	da.CheckAlive(t)
	db.CheckAlive(t)

	cfg := dissect.DefaultConfig()
	cfg.RDPorts = dissect.PortRange{First: 19740, Last: 19759}
	var viol []string
	supers, inSuper, atomResp := 0, 0, 0
	if _, err := dissect.DecodeFile(pcap, cfg, func(e *dissect.Event) {
		switch {
		case e.Kind == dissect.KindViolation:
			viol = append(viol, e.Message)
		case e.Kind == dissect.KindNote && strings.Contains(e.Message, "GSO super-packet"):
			supers++
		case e.GSO != nil:
			inSuper++
			if e.RDMAP != nil && e.RDMAP.Atomic != nil && !e.RDMAP.Atomic.Request {
				atomResp++
			}
		}
	}); err != nil {
		t.Fatal(err)
	}
	t.Logf("capture: %d GSO super-packets holding %d datagrams (%d Atomic Responses among them)", supers, inSuper, atomResp)
	if len(viol) > 0 {
		t.Errorf("%d violations decoding the sender-side capture, first: %s", len(viol), viol[0])
	}
	if supers == 0 || inSuper < 2*supers {
		t.Errorf("no GSO super-packet found in the capture (%d notes, %d datagrams): the test proves nothing", supers, inSuper)
	}
	bin, err := conformance.BuildIwarpdump(context.Background(), t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	stdout, stderr, status, err := conformance.RunIwarpdump(context.Background(), bin, "-strict", "-rd-ports", "19740-19759", pcap)
	if err != nil || status != 0 {
		t.Errorf("iwarpdump -strict: status %d, %v\n%s%s", status, err, lastLines(stdout, 40), stderr)
	}
	if !strings.Contains(stdout, "gso=") {
		t.Errorf("iwarpdump's output marks no datagram as cut from a GSO super-packet:\n%s", lastLines(stdout, 40))
	}
}

// lastLines is the end of s, at most n lines.
func lastLines(s string, n int) string {
	l := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(l) > n {
		l = l[len(l)-n:]
	}
	return strings.Join(l, "\n")
}
