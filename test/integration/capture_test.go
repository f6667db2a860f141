package integration

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/google/gopacket"
	"github.com/google/gopacket/layers"
	"github.com/google/gopacket/pcapgo"
	"github.com/iwarpd/iwarpd/dissect"
	"github.com/iwarpd/iwarpd/internal/pinfork"
	"github.com/iwarpd/iwarpd/ofverbs"
	"github.com/iwarpd/iwarpd/test/conformance"
	"github.com/iwarpd/iwarpd/test/daemontest"
)

// Conformance of live RC traffic: the scenarios run while dumpcap (or
// tshark) captures the loopback interface on the listener's port, then the
// capture is decoded by Debian's tshark (its own iWARP dissectors) and by
// iwarpdump -strict, and the two decoders must agree FPDU by FPDU.
//
// Loopback TCP checksums are left to the NIC that is not there (partial
// checksums), so tshark's checksum validation stays off here, unlike
// conformance.DecodeArgs.

// capture is a running packet capture.
type capture struct {
	port   int // the TCP port captured
	path   string
	cmd    *exec.Cmd
	stderr *lockedBuffer
	done   chan struct{}
}

// startCapture captures TCP port port on lo into a pcap, and waits (bounded)
// until it sees a probe connection attempt to the port. It skips the test if
// no capture tool is installed or capturing is not permitted.
func startCapture(t *testing.T, port int) *capture {
	t.Helper()
	return startCaptureFilter(t, port, fmt.Sprintf("tcp port %d", port))
}

// startCaptureFilter is startCapture with a capture filter of its own,
// which must take TCP port port (the probes and stop's end marker).
func startCaptureFilter(t *testing.T, port int, filter string) *capture {
	t.Helper()
	if _, err := conformance.FindTshark(); err != nil {
		t.Skip("skipping the capture test: ", err)
	}
	tool, err := exec.LookPath("dumpcap")
	if err != nil {
		if tool, err = exec.LookPath("tshark"); err != nil {
			t.Skip("skipping the capture test: neither dumpcap nor tshark found")
		}
	}
	c := &capture{port: port, path: filepath.Join(t.TempDir(), fmt.Sprintf("rc-%d.pcap", port)), stderr: &lockedBuffer{}, done: make(chan struct{})}
	c.cmd = exec.Command(tool, "-q", "-i", "lo", "-f", filter, "-P", "-B", "64", "-w", c.path)
	if filepath.Base(tool) == "tshark" {
		c.cmd = exec.Command(tool, "-q", "-i", "lo", "-f", filter, "-F", "pcap", "-B", "64", "-w", c.path)
	}
	c.cmd.Stderr = c.stderr
	c.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := pinfork.Start(c.cmd); err != nil {
		t.Skip("skipping the capture test: ", err)
	}
	go func() {
		c.cmd.Wait()
		close(c.done)
	}()
	t.Cleanup(func() {
		c.cmd.Process.Kill()
		<-c.done
	})
	// Ready when a probe (SYN to the port, refused) is in the file.
	deadline := time.Now().Add(scaled(15 * time.Second))
	for time.Now().Before(deadline) {
		select {
		case <-c.done:
			t.Skipf("skipping the capture test: %s exited: %s", tool, c.stderr)
		default:
		}
		if conn, err := net.DialTimeout("tcp", fmt.Sprintf("127.0.0.1:%d", port), 100*time.Millisecond); err == nil {
			conn.Close()
		}
		if fi, err := os.Stat(c.path); err == nil && fi.Size() > 24 {
			return c
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Skipf("skipping the capture test: %s captured nothing within %v: %s", tool, scaled(15*time.Second), c.stderr)
	return nil
}

// stop ends the capture with SIGINT (bounded) and returns the file.
//
// A SIGINT alone loses the tail of the capture: the kernel hands captured
// packets to libpcap a ring block at a time, retiring a block only when
// its timer fires (dumpcap's 250 ms read timeout), and dumpcap stops
// without reading the block still open. Sleeping 200 ms before the SIGINT
// lost the packets of the last 200-250 ms in about one run in five
// (measured: a UDP packet 200 ms before the SIGINT missed the file 3 times
// in 10; TestRCAccessViolations lost its last two Terminates). So after
// the test's traffic a marker — a refused SYN to 127.0.0.2 on the port,
// which no daemon listens on — is sent until dumpcap has written it to
// the file: everything before it is in the file then.
func (c *capture) stop(t *testing.T) string {
	t.Helper()
	port := c.port
	deadline := time.Now().Add(scaled(20 * time.Second))
	for i := 0; ; i++ {
		if i%5 == 0 {
			if conn, err := net.DialTimeout("tcp", fmt.Sprintf("127.0.0.2:%d", port), 100*time.Millisecond); err == nil {
				conn.Close()
			}
		}
		if hasMarker(c.path, port) {
			break
		}
		if time.Now().After(deadline) || i >= 100000 {
			c.cmd.Process.Kill()
			t.Fatalf("the capture's end marker (a SYN to 127.0.0.2:%d) not in the file after %v: %s", port, scaled(20*time.Second), c.stderr)
		}
		time.Sleep(50 * time.Millisecond)
	}
	c.cmd.Process.Signal(syscall.SIGINT)
	select {
	case <-c.done:
	case <-time.After(scaled(10 * time.Second)):
		c.cmd.Process.Kill()
		<-c.done
		t.Fatalf("capture did not stop on SIGINT: %s", c.stderr)
	}
	if dir := os.Getenv("IWARPD_KEEP_CAPTURES"); dir != "" {
		if b, err := os.ReadFile(c.path); err == nil {
			os.MkdirAll(dir, 0o755)
			os.WriteFile(filepath.Join(dir, strings.ReplaceAll(t.Name(), "/", "_")+"-"+filepath.Base(c.path)), b, 0o644)
		}
	}
	t.Logf("capture: %s", strings.TrimSpace(c.stderr.String()))
	return c.path
}

// hasMarker reports whether the pcap file being written at path already
// holds a TCP SYN to 127.0.0.2:port (stop's end marker). The last record
// may be half written: reading stops there.
func hasMarker(path string, port int) bool {
	f, err := os.Open(path)
	if err != nil {
		return false
	}
	defer f.Close()
	r, err := pcapgo.NewReader(f)
	if err != nil {
		return false
	}
	marker := netip.AddrFrom4([4]byte{127, 0, 0, 2})
	for range 1000000 {
		data, _, err := r.ReadPacketData()
		if err != nil {
			return false
		}
		p := gopacket.NewPacket(data, r.LinkType(), gopacket.NoCopy)
		ip, _ := p.Layer(layers.LayerTypeIPv4).(*layers.IPv4)
		tcp, _ := p.Layer(layers.LayerTypeTCP).(*layers.TCP)
		if ip != nil && tcp != nil && tcp.SYN && !tcp.ACK && int(tcp.DstPort) == port {
			if a, ok := netip.AddrFromSlice(ip.DstIP.To4()); ok && a == marker {
				return true
			}
		}
	}
	return false
}

// tsharkArgs: two passes, the MPA heuristic first, the Send-payload
// heuristics off (protocol-notes.md §D).
var tsharkArgs = []string{"-2", "-o", "tcp.try_heuristic_first:TRUE", "--disable-protocol", "rpcordma", "--disable-protocol", "smb_direct"}

var tsharkFields = []string{"frame.number", "iwarp_mpa.key.req", "iwarp_mpa.key.rep", "iwarp_mpa.rev", "iwarp_mpa.ulpdulength",
	"iwarp_rdma.opcode", "iwarp_mpa.crc_check", "_ws.expert.message", "_ws.expert.severity", "_ws.expert.group", "_ws.malformed"}

// rev2Warns are the expert warnings MPA Rev 2 frames raise in Wireshark's
// RFC 5044 dissector (protocol-notes.md §D.2).
var rev2Warns = []string{
	"Res field is NOT set to zero as required by RFC 5044",
	"Rev field is NOT set to one as required by RFC 5044",
}

// expertGroupSequence is PI_SEQUENCE (epan/proto.h): TCP analysis.
const expertGroupSequence = 0x02000000

// tsharkRows runs tshark -T fields on pcap.
func tsharkRows(t *testing.T, pcap string) []conformance.Row {
	t.Helper()
	tshark, err := conformance.FindTshark()
	if err != nil {
		t.Skip(err)
	}
	args := append([]string{"-r", pcap}, tsharkArgs...)
	args = append(args, "-T", "fields", "-E", "separator=/t", "-E", "occurrence=a", "-E", "aggregator=\x1f", "-E", "quote=n")
	for _, f := range tsharkFields {
		args = append(args, "-e", f)
	}
	ctx, cancel := context.WithTimeout(context.Background(), scaled(2*time.Minute))
	defer cancel()
	var out, errb bytes.Buffer
	cmd := exec.CommandContext(ctx, tshark, args...)
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Run(); err != nil {
		t.Fatalf("tshark: %v\n%s", err, errb.String())
	}
	var rows []conformance.Row
	sc := bufio.NewScanner(&out)
	sc.Buffer(make([]byte, 0, 1<<16), 1<<24)
	for sc.Scan() {
		cols := strings.Split(sc.Text(), "\t")
		if len(cols) != len(tsharkFields) {
			t.Fatalf("tshark: %d columns, want %d: %q", len(cols), len(tsharkFields), sc.Text())
		}
		r := conformance.Row{}
		for i, f := range tsharkFields {
			if cols[i] != "" {
				r[f] = strings.Split(cols[i], "\x1f")
			}
		}
		rows = append(rows, r)
	}
	return rows
}

// fpduSig is one FPDU as a decoder saw it.
type fpduSig struct {
	ulpdu  int
	opcode int
}

// dissectCapture decodes pcap with the project's decoder.
func dissectCapture(t *testing.T, pcap string) []*dissect.Event {
	t.Helper()
	var evs []*dissect.Event
	if _, err := dissect.DecodeFile(pcap, dissect.DefaultConfig(), func(e *dissect.Event) {
		c := *e
		evs = append(evs, &c)
	}); err != nil {
		t.Fatalf("dissect %s: %v", pcap, err)
	}
	return evs
}

var iwarpdumpOnce struct {
	sync.Once
	path string
	err  error
}

// iwarpdumpStrict runs the built iwarpdump -strict -q on pcap: exit 0.
func iwarpdumpStrict(t *testing.T, pcap string) {
	t.Helper()
	iwarpdumpOnce.Do(func() {
		dir, err := os.MkdirTemp("", "iwarpd-rc-iwarpdump-")
		if err != nil {
			iwarpdumpOnce.err = err
			return
		}
		iwarpdumpOnce.path, iwarpdumpOnce.err = conformance.BuildIwarpdump(context.Background(), dir)
	})
	if iwarpdumpOnce.err != nil {
		t.Fatal(iwarpdumpOnce.err)
	}
	stdout, stderr, status, err := conformance.RunIwarpdump(context.Background(), iwarpdumpOnce.path, "-strict", "-q", pcap)
	if err != nil || status != 0 {
		t.Errorf("iwarpdump -strict %s: status %d, %v\n%s%s", pcap, status, err, stdout, stderr)
	}
}

// checkConformance decodes the capture with tshark and iwarpdump: every
// FPDU decoded by both (the same FPDUs in the same order), CRCs good
// (crc) or absent, no malformed frame, no expert error, warnings only the
// Rev 2 ones (TCP sequence analysis is logged); iwarpdump -strict passes.
// It returns the project decoder's events.
func checkConformance(t *testing.T, pcap string, rev int, crc bool, conns int) []*dissect.Event {
	t.Helper()
	rows := tsharkRows(t, pcap)
	var tsh []fpduSig
	reqs, reps := 0, 0
	for i, r := range rows {
		frame := i + 1
		if r["_ws.malformed"] != nil {
			t.Errorf("tshark: frame %d malformed: %v", frame, r["_ws.malformed"])
		}
		reqs += len(r["iwarp_mpa.key.req"])
		reps += len(r["iwarp_mpa.key.rep"])
		for _, v := range r["iwarp_mpa.rev"] {
			if v != strconv.Itoa(rev) {
				t.Errorf("tshark: frame %d: MPA revision %s, want %d", frame, v, rev)
			}
		}
		lens, ops := r["iwarp_mpa.ulpdulength"], r["iwarp_rdma.opcode"]
		if len(lens) != len(ops) {
			t.Errorf("tshark: frame %d: %d FPDUs but %d RDMAP opcodes", frame, len(lens), len(ops))
		}
		for j := range min(len(lens), len(ops)) {
			n, _ := strconv.ParseInt(lens[j], 0, 64)
			op, _ := strconv.ParseInt(ops[j], 0, 64)
			tsh = append(tsh, fpduSig{int(n), int(op)})
		}
		msgs, sevs, groups := r["_ws.expert.message"], r["_ws.expert.severity"], r["_ws.expert.group"]
		for j, m := range msgs {
			var sev, group uint64
			if j < len(sevs) {
				sev, _ = strconv.ParseUint(sevs[j], 0, 32)
			}
			if j < len(groups) {
				group, _ = strconv.ParseUint(groups[j], 0, 32)
			}
			switch {
			case sev >= conformance.SeverityError:
				t.Errorf("tshark: frame %d: expert error %q", frame, m)
			case sev >= conformance.SeverityWarn && rev == 2 && slices.Contains(rev2Warns, m):
			case sev >= conformance.SeverityWarn && group == expertGroupSequence:
				if m != "Connection reset (RST)" { // the readiness probes
					t.Logf("tshark: frame %d: TCP analysis warning %q", frame, m)
				}
			case sev >= conformance.SeverityWarn:
				t.Errorf("tshark: frame %d: expert warning %q not whitelisted", frame, m)
			}
		}
	}
	if reqs != conns || reps != conns {
		t.Errorf("tshark: %d MPA Requests and %d Replies, want %d each", reqs, reps, conns)
	}
	// CRC verdicts, as tshark displays them.
	if tshark, err := conformance.FindTshark(); err == nil {
		shown, err := conformance.Shownames(context.Background(), tshark, pcap, true, "iwarp_mpa.crc_check")
		if err != nil {
			t.Fatal(err)
		}
		n := 0
		for f, frame := range shown {
			for _, s := range frame {
				n++
				if !strings.Contains(s, "Good CRC32") {
					t.Errorf("tshark: frame %d: %s", f+1, s)
				}
			}
		}
		if crc && n != len(tsh) {
			t.Errorf("tshark checked %d CRCs of %d FPDUs", n, len(tsh))
		}
		if !crc && n != 0 {
			t.Errorf("tshark checked %d CRCs although CRC is off", n)
		}
	}
	// The project's decoder: the same FPDUs, in the same order.
	evs := dissectCapture(t, pcap)
	var own []fpduSig
	for _, e := range evs {
		switch e.Kind {
		case dissect.KindViolation:
			t.Errorf("dissect: violation at frame %d: %s", e.Frame, e.Message)
		case dissect.KindSegment:
			if e.LLP != dissect.LLPMPA || e.FPDU == nil || e.RDMAP == nil {
				continue
			}
			own = append(own, fpduSig{e.FPDU.ULPDULen, int(e.RDMAP.Opcode)})
			want := "off"
			if crc {
				want = "ok"
			}
			if e.CRC != want {
				t.Errorf("dissect: frame %d: CRC %s, want %s", e.Frame, e.CRC, want)
			}
		}
	}
	if len(own) == 0 {
		t.Error("no FPDU in the capture")
	}
	if !slices.Equal(own, tsh) {
		t.Errorf("tshark decoded %d FPDUs, iwarpd's decoder %d; they differ", len(tsh), len(own))
		for i := range max(len(own), len(tsh)) {
			var a, b fpduSig
			if i < len(own) {
				a = own[i]
			}
			if i < len(tsh) {
				b = tsh[i]
			}
			if a != b {
				t.Logf("FPDU %d: dissect %+v, tshark %+v", i, a, b)
			}
		}
	}
	iwarpdumpStrict(t, pcap)
	t.Logf("%s: %d frames, %d FPDUs decoded by both", filepath.Base(pcap), len(rows), len(own))
	return evs
}

// TestRCCaptureConformance: RC scenarios captured live on lo and decoded by
// tshark and iwarpdump -strict: MPA Rev 2 with CRC (every opcode and a
// local invalidate, graceful disconnect), Rev 2 without CRC (both daemons
// -mpa-crc off), MPA Rev 1 with CRC.
func TestRCCaptureConformance(t *testing.T) {
	for _, sc := range []struct {
		name  string
		flags []string
		opts  ofverbs.MPAOptions
		rev   int
		crc   bool
	}{
		{"rev2-crc", nil, ofverbs.MPAOptions{}, 2, true},
		{"rev2-nocrc", []string{"-mpa-crc", "off"}, ofverbs.MPAOptions{}, 2, false},
		{"rev1-crc", nil, ofverbs.MPAOptions{Revision: 1}, 1, true},
	} {
		t.Run(sc.name, func(t *testing.T) {
			da, db := startRCDaemons(t, "rccap", daemontest.Options{}, sc.flags...)
			ctxA, ctxB := da.Open(t, "cap-server"), db.Open(t, "cap-client")
			srv := newRCEP(t, "server", ctxA, 1<<16, rcAccessAll)
			cli := newRCEP(t, "client", ctxB, 1<<16, rcAccessAll)
			port := freeTCPPort(t)
			capt := startCapture(t, port)
			l := listenOn(t, ctxA, port)
			rcConnect(t, l, srv, cli, sc.opts)
			if info := cli.qp.ConnInfo(); info.MPA.CRC != sc.crc || int(info.MPA.Revision) != sc.rev {
				t.Fatalf("negotiated %+v, want Rev %d CRC %v", info.MPA, sc.rev, sc.crc)
			}
			for i, size := range []int{1, 4096, 65536} {
				if err := rcAllOpcodes(cli, srv, size, 1000*(i+1)); err != nil {
					t.Fatal(err)
				}
			}
			if err := rcAllOpcodes(srv, cli, 3000, 9000); err != nil {
				t.Fatal(err)
			}
			if _, err := rcLocalInvalidate(cli, 777); err != nil {
				t.Fatal(err)
			}
			if err := cli.qp.Disconnect(); err != nil {
				t.Fatal(err)
			}
			for _, e := range []*rcEP{cli, srv} {
				if _, err := waitCM(e, ofverbs.CMDisconnected, 10*time.Second); err != nil {
					t.Error(err)
				}
			}
			pcap := capt.stop(t)
			evs := checkConformance(t, pcap, sc.rev, sc.crc, 1)
			for _, e := range evs {
				if e.RDMAP != nil && e.RDMAP.Terminate != nil {
					t.Errorf("frame %d: a Terminate in a clean scenario: %+v", e.Frame, e.RDMAP.Terminate)
				}
			}
		})
	}
}
