package hostile

import (
	"bytes"
	"encoding/json"
	"fmt"
	"testing"

	"github.com/iwarpd/iwarpd/ofverbs"
	"github.com/iwarpd/iwarpd/test/daemontest"
)

// RD ports of TestProcessMemoryRDSendWritesOnce.
const pmRDSendPortsA, pmRDSendPortsB = "26840-26844", "26845-26849"

// procMemWrite returns the daemon's counters process_mem_written_bytes
// (octets it wrote to client processes with pwrite of /proc/PID/mem) and
// process_mem_staged_bytes, from iwarpctl -json counters.
func procMemWrite(t *testing.T, d *daemontest.Daemon) (written, staged int64) {
	t.Helper()
	out, code := ctl(t, d.Sock, "-json", "counters")
	if code != 0 {
		t.Fatalf("iwarpctl counters: exit %d: %s", code, out)
	}
	var c map[string]int64
	if err := json.Unmarshal([]byte(out), &c); err != nil {
		t.Fatalf("iwarpctl -json counters: %v: %s", err, out)
	}
	for _, k := range []string{"process_mem_written_bytes", "process_mem_staged_bytes"} {
		if _, ok := c[k]; !ok {
			t.Fatalf("iwarpctl counters has no %s: %s", k, out)
		}
	}
	return c["process_mem_written_bytes"], c["process_mem_staged_bytes"]
}

// TestProcessMemoryRDSendWritesOnce: an RD Send into a receive whose
// buffer is process memory stages and writes each octet of the message
// about once, and nothing of the buffer past the message
// (verbsd/ud/recvrange.go: each segment translates only its own octets).
// Before, every datagram of the message staged the receive's whole buffer
// (a 1 MiB MPI run staged 18 times what it received: docs/benchmarks.md
// "MPI large messages"); here the receive is twice the message, split over
// two SGEs at an octet no segment boundary falls on. The property checked
// is the receiver's process-memory counters, not a time; every octet is
// compared.
func TestProcessMemoryRDSendWritesOnce(t *testing.T) {
	da := daemontest.Start(t, "pm-rds-a", daemontest.Options{Ports: nextPorts(), Extra: []string{"-rd-ports", pmRDSendPortsA}})
	db := daemontest.Start(t, "pm-rds-b", daemontest.Options{Ports: nextPorts(), Extra: []string{"-rd-ports", pmRDSendPortsB}})
	const n, rounds, cut = 1 << 20, 3, 100003
	a := newPMEnd(t, "a", da.Open(t, "pm-rds-a"), ofverbs.QPTypeRD, n)
	b := newPMEnd(t, "b", db.Open(t, "pm-rds-b"), ofverbs.QPTypeRD, 2*n)
	ah, err := a.pd.CreateAHTo(b.qp.Endpoint())
	if err != nil {
		t.Fatal(err)
	}
	writtenB, stagedB := procMemWrite(t, db)
	for i := range rounds {
		fill(a.mem, 130+i)
		for k := range b.mem {
			b.mem[k] = 0xa5
		}
		b.postRecv(t, uint64(i), b.mr.SGE(b.mem[:cut]), b.mr.SGE(b.mem[cut:]))
		a.post(t, ofverbs.SendWR{ID: uint64(i), Opcode: ofverbs.WRSend, AH: ah, Signaled: true,
			SGL: []ofverbs.SGE{a.mr.SGE(a.mem)}})
		a.expect(t, a.scq, fmt.Sprintf("send %d", i), ofverbs.WCSuccess)
		wc := b.expect(t, b.rcq, fmt.Sprintf("receive %d", i), ofverbs.WCSuccess)
		if int(wc.ByteLen) != n || !bytes.Equal(b.mem[:n], a.mem) {
			t.Fatalf("send %d: byte_len %d, data equal %v", i, wc.ByteLen, bytes.Equal(b.mem[:n], a.mem))
		}
		for k, c := range b.mem[n:] {
			if c != 0xa5 {
				t.Fatalf("send %d: octet %d of the receive buffer, past the message, was written", i, n+k)
			}
		}
	}
	w, st := procMemWrite(t, db)
	// Duplicates are dropped before placement; a few retransmitted
	// segments at most, far below a second copy of everything.
	const most = 3 // halves: 1.5 per octet
	if got := w - writtenB; got < rounds*n || got > rounds*n*most/2 {
		t.Errorf("%d Sends of %d octets: the receiver's daemon wrote %d octets to the process (%.2f per octet), want %d to %d",
			rounds, n, got, float64(got)/float64(rounds*n), rounds*n, rounds*n*most/2)
	}
	if got := st - stagedB; got < rounds*n || got > rounds*n*most/2 {
		t.Errorf("%d Sends of %d octets: the receiver's daemon staged %d octets for the receives (%.2f per octet), want %d to %d",
			rounds, n, got, float64(got)/float64(rounds*n), rounds*n, rounds*n*most/2)
	}
	da.CheckAlive(t)
	db.CheckAlive(t)
}
