package hostile

import (
	"bytes"
	"encoding/json"
	"fmt"
	"testing"

	"github.com/iwarpd/iwarpd/ofverbs"
	"github.com/iwarpd/iwarpd/test/daemontest"
)

// pmWindowListenPort is TestProcessMemoryRCReadsOnce's RC listener (TCP).
const pmWindowListenPort = 26853

// procMem returns the daemon's counters process_mem_read_bytes (octets it
// read from client processes with pread of /proc/PID/mem) and
// process_mem_staged_bytes (octets of staging buffers it took for process
// memory), from iwarpctl -json counters.
func procMem(t *testing.T, d *daemontest.Daemon) (read, staged int64) {
	t.Helper()
	out, code := ctl(t, d.Sock, "-json", "counters")
	if code != 0 {
		t.Fatalf("iwarpctl counters: exit %d: %s", code, out)
	}
	var c map[string]int64
	if err := json.Unmarshal([]byte(out), &c); err != nil {
		t.Fatalf("iwarpctl -json counters: %v: %s", err, out)
	}
	for _, k := range []string{"process_mem_read_bytes", "process_mem_staged_bytes"} {
		if _, ok := c[k]; !ok {
			t.Fatalf("iwarpctl counters has no %s: %s", k, out)
		}
	}
	return c["process_mem_read_bytes"], c["process_mem_staged_bytes"]
}

// pmOnce fails t unless got octets (of what, over rounds messages of n
// octets) are between one and most times the octets moved.
func pmOnce(t *testing.T, what string, got int64, rounds, n, most int) {
	t.Helper()
	if got < int64(rounds*n) || got > int64(most*rounds*n) {
		t.Errorf("%d × %d octets: %s %d octets (%.1f per octet), want %d to %d",
			rounds, n, what, got, float64(got)/float64(rounds*n), rounds*n, most*rounds*n)
	}
}

// TestProcessMemoryRCReadsOnce: an RC message from and into process memory
// (a Read Response, a Send of two SGEs) is read from the sender's process
// and staged at the receiver about once (docs/memory-registration.md,
// "Inside the daemon"). The daemons serve one writev batch per QP per
// engine pass (-poll-batch 1), so a 1 MiB message goes out over 16-32
// passes on loopback (one FPDU of the 32-64 KiB EMSS each) and arrives in
// as many FPDUs. Before, the sender read the whole message again in every
// pass (34 and 33 times its length here) and the receiver staged the
// whole sink for every FPDU; over a veth of MTU 1500 that made RxM's
// rendezvous of 1 MiB messages (an RDMA Read from heap to heap) crawl
// (issue 10: iwarpd;ofi_rxm at 0.01x tcp). The property checked is the
// daemons' process-memory counters, not a time; every octet is compared.
func TestProcessMemoryRCReadsOnce(t *testing.T) {
	extra := []string{"-poll-batch", "1"}
	da := daemontest.Start(t, "pm-rcw-a", daemontest.Options{Ports: nextPorts(), Extra: extra})
	db := daemontest.Start(t, "pm-rcw-b", daemontest.Options{Ports: nextPorts(), Extra: extra})
	const n, rounds = 1 << 20, 3
	ca, cb := da.Open(t, "pm-rcw-a"), db.Open(t, "pm-rcw-b")
	a := newPMEnd(t, "a", ca, ofverbs.QPTypeRC, 2*n)
	b := newPMEnd(t, "b", cb, ofverbs.QPTypeRC, 2*n)
	pmConnect(t, pmWindowListenPort, b, a)
	// At most this many octets per octet moved: a pass's window is what
	// the pass can send, and nothing stops a loopback pass short.
	const most = 2

	// RDMA Reads of b's heap into a's (b's daemon sends the Read
	// Responses, a's places them).
	_, stagedA := procMem(t, da)
	readB, _ := procMem(t, db)
	for i := range rounds {
		fill(b.mem[:n], 90+i)
		a.post(t, ofverbs.SendWR{ID: uint64(i), Opcode: ofverbs.WRRDMARead, Signaled: true,
			SGL: []ofverbs.SGE{a.mr.SGE(a.mem[n : 2*n])}, RemoteAddr: b.mr.Addr(), RKey: b.mr.RKey()})
		a.expect(t, a.scq, fmt.Sprintf("read %d", i), ofverbs.WCSuccess)
		if !bytes.Equal(a.mem[n:2*n], b.mem[:n]) {
			t.Fatalf("read %d: data differ", i)
		}
	}
	r, _ := procMem(t, db)
	pmOnce(t, "RDMA Reads: the responder's daemon read from the process", r-readB, rounds, n, most)
	_, st := procMem(t, da)
	pmOnce(t, "RDMA Reads: the requester's daemon staged for the sink", st-stagedA, rounds, n, most)

	// Sends of two SGEs whose boundary is not a window's (a's daemon
	// reads, b's stages the receive).
	const cut = 100003
	readA, _ := procMem(t, da)
	_, stagedB := procMem(t, db)
	for i := range rounds {
		fill(a.mem[:n], 120+i)
		clear(b.mem[n : 2*n])
		b.postRecv(t, uint64(i), b.mr.SGE(b.mem[n:n+cut]), b.mr.SGE(b.mem[n+cut:2*n]))
		a.post(t, ofverbs.SendWR{ID: uint64(10 + i), Opcode: ofverbs.WRSend, Signaled: true,
			SGL: []ofverbs.SGE{a.mr.SGE(a.mem[:cut]), a.mr.SGE(a.mem[cut:n])}})
		a.expect(t, a.scq, fmt.Sprintf("send %d", i), ofverbs.WCSuccess)
		wc := b.expect(t, b.rcq, fmt.Sprintf("receive %d", i), ofverbs.WCSuccess)
		if int(wc.ByteLen) != n || !bytes.Equal(b.mem[n:2*n], a.mem[:n]) {
			t.Fatalf("send %d: byte_len %d, data equal %v", i, wc.ByteLen, bytes.Equal(b.mem[n:2*n], a.mem[:n]))
		}
	}
	r, _ = procMem(t, da)
	pmOnce(t, "Sends: the sender's daemon read from the process", r-readA, rounds, n, most)
	_, st = procMem(t, db)
	pmOnce(t, "Sends: the receiver's daemon staged for the receive", st-stagedB, rounds, n, most)
	da.CheckAlive(t)
	db.CheckAlive(t)
}

// RD ports of TestProcessMemoryRDReadsOnce.
const pmWindowRDPortsA, pmWindowRDPortsB = "26820-26829", "26830-26839"

// TestProcessMemoryRDReadsOnce: an RD RDMA Read whose source is process
// memory reads each octet of the source from the process about once
// (verbsd/rd/send.go readAhead: 256 KiB per access, not one access per
// datagram), and the Read Request's access check reads none of it (it
// probes; before, it read the whole source and threw it away, so every
// octet was read twice: docs/benchmarks.md "MPI large messages"). The
// property checked is the responder's process-memory counter, not a
// time; every octet is compared.
func TestProcessMemoryRDReadsOnce(t *testing.T) {
	da := daemontest.Start(t, "pm-rdw-a", daemontest.Options{Ports: nextPorts(), Extra: []string{"-rd-ports", pmWindowRDPortsA}})
	db := daemontest.Start(t, "pm-rdw-b", daemontest.Options{Ports: nextPorts(), Extra: []string{"-rd-ports", pmWindowRDPortsB}})
	const n, rounds = 1 << 20, 3
	a := newPMEnd(t, "a", da.Open(t, "pm-rdw-a"), ofverbs.QPTypeRD, n)
	b := newPMEnd(t, "b", db.Open(t, "pm-rdw-b"), ofverbs.QPTypeRD, n)
	ah, err := a.pd.CreateAHTo(b.qp.Endpoint())
	if err != nil {
		t.Fatal(err)
	}
	readB, _ := procMem(t, db)
	for i := range rounds {
		fill(b.mem[:n], 70+i)
		clear(a.mem[:n])
		a.post(t, ofverbs.SendWR{ID: uint64(i), Opcode: ofverbs.WRRDMARead, AH: ah, Signaled: true,
			SGL: []ofverbs.SGE{a.mr.SGE(a.mem[:n])}, RemoteAddr: b.mr.Addr(), RKey: b.mr.RKey()})
		a.expect(t, a.scq, fmt.Sprintf("read %d", i), ofverbs.WCSuccess)
		if !bytes.Equal(a.mem[:n], b.mem[:n]) {
			t.Fatalf("read %d: data differ", i)
		}
	}
	r, _ := procMem(t, db)
	// Retransmissions look their segments up again: on loopback a few at
	// most, far below a second read of everything.
	if got := r - readB; got < rounds*n || got > rounds*n*3/2 {
		t.Errorf("%d RDMA Reads of %d octets: the responder's daemon read %d octets from the process (%.2f per octet), want %d to %d",
			rounds, n, got, float64(got)/float64(rounds*n), rounds*n, rounds*n*3/2)
	}
	da.CheckAlive(t)
	db.CheckAlive(t)
}
