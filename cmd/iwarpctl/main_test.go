package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/iwarpd/iwarpd/internal/shm"
	"github.com/iwarpd/iwarpd/proto"
	"github.com/iwarpd/iwarpd/test/daemontest"
)

// sample is a daemon state with one session holding one of everything.
func sample() *proto.Inspect {
	return &proto.Inspect{
		Daemon: "v-test", PID: 4242,
		Device: proto.DeviceAttr{Name: "iwarp0", MaxQP: 64, MaxMsgUD: 1 << 20, DatagramSize: 1472},
		Port:   proto.PortAttr{State: "active", Addr: "127.0.0.1", DatagramSize: 1472, UDPorts: "17000-17499"},
		Sessions: []proto.SessionInfo{{
			ID: 7, PID: 999, UID: 1000, GID: 100, Client: "perf", PDs: 1, RegBytes: 3 << 20,
			MRs: []proto.MRInfo{{Handle: 3, LKey: 0x3a1, RKey: 0x3a1, Length: 4096, Access: proto.AccessLocalWrite | proto.AccessRemoteRead}},
			CQs: []proto.CQInfo{{Handle: 2, Depth: 256, Armed: true}},
			QPs: []proto.QPInfo{{Handle: 4, QPN: 17, Type: "UD", State: "RTS", Addr: "127.0.0.1:17003",
				Counters: map[string]int64{"datagrams_in": 5, "drop_no_recv": 0, "bytes_in": 320}, Engine: 1}},
		}},
		Engines: []proto.EngineInfo{{ID: 0, CPU: -1, Passes: 10}, {ID: 1, CPU: 3, QPs: 1, Passes: 900, WorkPasses: 450,
			Wakeups: 12, CPUTimeNS: 250e6, UptimeNS: 1e9}},
		Counters: map[string]int64{"datagrams_in": 5, "drop_crc": 1, "drop_no_recv": 2, "bytes_out": 0},
	}
}

func TestRenderText(t *testing.T) {
	tests := []struct {
		cmd  string
		want []string
	}{
		{"status", []string{"iwarpd v-test (pid 4242), device iwarp0", "UD ports 17000-17499", "sessions 1, QPs 1, CQs 1, MRs 1 (3.0 MiB registered)",
			"perf", "127.0.0.1:17003", "drop_crc", "bytes_in=320 datagrams_in=5",
			"datagrams in 5, out 0; bytes in 0, out 0; CRC errors 1; drops 3", "non-zero counters"}},
		{"device", []string{"name:", "iwarp0", "max_msg_ud:", "1048576", "port.ud_ports:", "17000-17499"}},
		{"sessions", []string{"SESSION", "999", "1000", "perf", "3.0 MiB"}},
		{"qps", []string{"QPN", "ENGINE", "17", "UD", "RTS", "127.0.0.1:17003", "bytes_in=320 datagrams_in=5"}},
		{"engines", []string{"ENGINE", "LOAD", "WAKEUPS", "25.0%", "0.250s", "450", "900", "12"}},
		{"cqs", []string{"DEPTH", "256", "true"}},
		{"mrs", []string{"LKEY", "0x000003a1", "4096", "local-write,remote-read"}},
		{"counters", []string{"drop_crc", "datagrams_in", "drop_no_recv", "bytes_out"}},
	}
	for _, tt := range tests {
		t.Run(tt.cmd, func(t *testing.T) {
			var b bytes.Buffer
			if err := renderText(&b, sample(), tt.cmd); err != nil {
				t.Fatal(err)
			}
			for _, w := range tt.want {
				if !strings.Contains(b.String(), w) {
					t.Errorf("output lacks %q:\n%s", w, b.String())
				}
			}
			if tt.cmd == "qps" && strings.Contains(b.String(), "drop_no_recv") {
				t.Errorf("zero QP counters should be left out:\n%s", b.String())
			}
		})
	}
	var b bytes.Buffer
	renderText(&b, &proto.Inspect{}, "qps")
	if !strings.Contains(b.String(), "(no queue pairs)") {
		t.Errorf("empty qps: %q", b.String())
	}
}

func TestSelectJSON(t *testing.T) {
	in := sample()
	var qps []map[string]any
	mustRoundTrip(t, selectJSON(in, "qps"), &qps)
	if len(qps) != 1 || qps[0]["session"] != float64(7) || qps[0]["qpn"] != float64(17) || qps[0]["state"] != "RTS" {
		t.Errorf("qps JSON = %v", qps)
	}
	var mrs []map[string]any
	mustRoundTrip(t, selectJSON(in, "mrs"), &mrs)
	if len(mrs) != 1 || mrs[0]["lkey"] != float64(0x3a1) || mrs[0]["session"] != float64(7) {
		t.Errorf("mrs JSON = %v", mrs)
	}
	var dev map[string]map[string]any
	mustRoundTrip(t, selectJSON(in, "device"), &dev)
	if dev["device"]["name"] != "iwarp0" || dev["port"]["ud_ports"] != "17000-17499" {
		t.Errorf("device JSON = %v", dev)
	}
	var all proto.Inspect
	mustRoundTrip(t, selectJSON(in, "status"), &all)
	if all.PID != 4242 || len(all.Sessions) != 1 || all.Counters["drop_crc"] != 1 {
		t.Errorf("status JSON = %+v", all)
	}
	// Empty lists are [] and empty counters {} (scripts can index them).
	for cmd, want := range map[string]string{"qps": "[]", "cqs": "[]", "mrs": "[]", "sessions": "[]", "counters": "{}"} {
		js, _ := json.Marshal(selectJSON(&proto.Inspect{}, cmd))
		if string(js) != want {
			t.Errorf("%s on an empty daemon = %s, want %s", cmd, js, want)
		}
	}
}

func mustRoundTrip(t *testing.T, v, out any) {
	t.Helper()
	js, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(js, out); err != nil {
		t.Fatalf("%v: %s", err, js)
	}
}

func TestHumanBytes(t *testing.T) {
	for n, want := range map[uint64]string{0: "0 B", 1023: "1023 B", 1024: "1.0 KiB", 3 << 20: "3.0 MiB", 5 << 30: "5.0 GiB"} {
		if got := humanBytes(n); got != want {
			t.Errorf("humanBytes(%d) = %q, want %q", n, got, want)
		}
	}
}

// --- tests with the real binaries ---

// TestMain builds iwarpctl and iwarpd once per test binary
// (test/daemontest, which also starts the daemons: UD ports 27300-27349 on
// 127.0.0.1, or a test's own).
func TestMain(m *testing.M) { os.Exit(daemontest.Main(m, nil)) }

const udPorts = "27300-27349"

func runCtl(t *testing.T, bin string, args ...string) (stdout, stderr string, code int) {
	t.Helper()
	var o, e bytes.Buffer
	cmd := exec.Command(bin, args...)
	cmd.Stdout, cmd.Stderr = &o, &e
	err := cmd.Run()
	var ee *exec.ExitError
	switch {
	case err == nil:
	case errors.As(err, &ee):
		code = ee.ExitCode()
	default:
		t.Fatal(err)
	}
	return o.String(), e.String(), code
}

func TestNotRunning(t *testing.T) {
	ctl := daemontest.Bins["iwarpctl"]
	sock := filepath.Join(t.TempDir(), "none.sock")
	_, stderr, code := runCtl(t, ctl, "-socket", sock, "qps")
	if code != exitNotRunning {
		t.Errorf("exit status %d, want %d", code, exitNotRunning)
	}
	if want := "iwarpd is not running at " + sock; !strings.Contains(stderr, want) {
		t.Errorf("stderr %q lacks %q", stderr, want)
	}
}

func TestUsage(t *testing.T) {
	ctl := daemontest.Bins["iwarpctl"]
	for _, args := range [][]string{{"bogus"}, {"qps", "cqs"}, {"-nosuchflag"}} {
		_, stderr, code := runCtl(t, ctl, args...)
		if code != exitUsage {
			t.Errorf("%v: exit status %d, want %d (stderr %q)", args, code, exitUsage, stderr)
		}
	}
	if _, _, code := runCtl(t, ctl, "-h"); code != exitOK {
		t.Errorf("-h: exit status %d", code)
	}
}

// rawSession is a verbs session made with proto directly (iwarpctl must not
// depend on ofverbs): a PD, a CQ, an MR and a UD queue pair.
type rawSession struct {
	conn    *proto.Conn
	seq     uint32
	regions []*shm.Region
	qpAddr  string
	pd, cq  uint32
}

func (s *rawSession) call(t *testing.T, op proto.Op, body, out any, fds ...int) {
	t.Helper()
	s.seq++
	if err := s.conn.Send(proto.Header{Version: proto.ABIVersion, Op: op, Seq: s.seq}, body, fds...); err != nil {
		t.Fatal(err)
	}
	for {
		h, rb, rfds, err := s.conn.Receive()
		if err != nil {
			t.Fatalf("%v: %v", op, err)
		}
		if h.Op == proto.OpEvent {
			continue
		}
		if op == proto.OpHello {
			for _, fd := range rfds {
				closeFD(fd)
			}
		}
		if h.Status != 0 {
			t.Fatalf("%v: daemon error %v: %s", op, h.Status, rb)
		}
		if out != nil {
			if err := proto.Unmarshal(rb, out); err != nil {
				t.Fatalf("%v: %v", op, err)
			}
		}
		return
	}
}

func (s *rawSession) region(t *testing.T, name string, size int) *shm.Region {
	t.Helper()
	r, err := shm.Create(name, size)
	if err != nil {
		t.Fatal(err)
	}
	s.regions = append(s.regions, r)
	return r
}

func openRawSession(t *testing.T, sock string) *rawSession {
	t.Helper()
	conn, err := proto.Dial(sock)
	if err != nil {
		t.Fatal(err)
	}
	s := &rawSession{conn: conn}
	t.Cleanup(func() {
		conn.Close()
		for _, r := range s.regions {
			r.Close()
		}
	})
	s.call(t, proto.OpHello, proto.HelloRequest{ABI: proto.ABIVersion, Client: "ctl-test"}, nil)
	var pd, cq proto.Handle
	s.call(t, proto.OpAllocPD, nil, &pd)

	const depth = 16
	cqr := s.region(t, "cq", proto.RingBytes(depth, proto.CQESize))
	proto.InitRingHeader(cqr.Mem, proto.RingCQ, depth, proto.CQESize)
	s.call(t, proto.OpCreateCQ, proto.CreateCQRequest{Depth: depth}, &cq, cqr.FD())

	buf := s.region(t, "buf", 8192)
	var mr proto.RegMRReply
	s.call(t, proto.OpRegMR, proto.RegMRRequest{PD: pd.Handle, Offset: 0, Length: 8192,
		Addr: uint64(uintptrOf(buf.Mem)), Access: proto.AccessLocalWrite}, &mr, buf.FD())

	s.pd, s.cq = pd.Handle, cq.Handle
	s.qpAddr = s.createUDQP(t)
	return s
}

// createUDQP creates one more UD queue pair in the session's PD, on its CQ,
// and returns its address.
func (s *rawSession) createUDQP(t *testing.T) string {
	t.Helper()
	caps := proto.QPCaps{MaxSendWR: 8, MaxRecvWR: 8, MaxSendSGE: 1, MaxRecvSGE: 1}
	sqStride, rqStride := proto.SQEStride(caps.MaxSendSGE, caps.MaxInline), proto.RQEStride(caps.MaxRecvSGE)
	sqBytes := proto.RingBytes(caps.MaxSendWR, sqStride)
	qpr := s.region(t, "qp", sqBytes+proto.RingBytes(caps.MaxRecvWR, rqStride))
	proto.InitRingHeader(qpr.Mem, proto.RingSQ, caps.MaxSendWR, sqStride)
	proto.InitRingHeader(qpr.Mem[sqBytes:], proto.RingRQ, caps.MaxRecvWR, rqStride)
	var qp proto.CreateQPReply
	s.call(t, proto.OpCreateQP, proto.CreateQPRequest{PD: s.pd, Type: proto.QPTypeUD, SendCQ: s.cq,
		RecvCQ: s.cq, Caps: caps}, &qp, qpr.FD())
	return qp.Addr
}

// TestEnginesAgainstDaemon: iwarpctl engines of a daemon with -engines 2
// and two QPs (spread: one each) — the engines, their QPs, pinned CPUs.
func TestEnginesAgainstDaemon(t *testing.T) {
	ctl := daemontest.Bins["iwarpctl"]
	sock := daemontest.Start(t, "iwarpd", daemontest.Options{Ports: udPorts, Addr: "127.0.0.1", Extra: []string{"-engines", "2"}}).Sock
	openRawSession(t, sock) // each makes a UD QP
	openRawSession(t, sock)
	var engs []proto.EngineInfo
	out, stderr, code := runCtl(t, ctl, "-socket", sock, "-json", "engines")
	if err := json.Unmarshal([]byte(out), &engs); code != 0 || err != nil {
		t.Fatalf("engines -json: exit %d, %v: %s %s", code, err, out, stderr)
	}
	if len(engs) != 2 {
		t.Fatalf("engines = %+v, want 2", engs)
	}
	for i, e := range engs {
		if e.ID != i || e.QPs != 1 || e.CPU < 0 || e.UptimeNS <= 0 {
			t.Errorf("engine %d = %+v: want its id, a QP, a pinned CPU", i, e)
		}
	}
	out, _, code = runCtl(t, ctl, "-socket", sock, "engines")
	if code != 0 || !strings.Contains(out, "ENGINE") || strings.Count(out, "\n") != 3 {
		t.Errorf("engines text (exit %d):\n%s", code, out)
	}
	var qps []qpRow
	out, _, _ = runCtl(t, ctl, "-socket", sock, "-json", "qps")
	if err := json.Unmarshal([]byte(out), &qps); err != nil || len(qps) != 2 || qps[0].Engine == qps[1].Engine {
		t.Errorf("qps -json (%v): want two QPs on different engines: %s", err, out)
	}
}

func TestAgainstDaemon(t *testing.T) {
	ctl := daemontest.Bins["iwarpctl"]
	sock := daemontest.Start(t, "iwarpd", daemontest.Options{Ports: udPorts, Addr: "127.0.0.1"}).Sock

	// An idle daemon: no sessions besides iwarpctl's own inspect session
	// (which the daemon may or may not list).
	out, stderr, code := runCtl(t, ctl, "-socket", sock)
	if code != 0 {
		t.Fatalf("status: exit %d, stderr %q", code, stderr)
	}
	if !strings.Contains(out, "iwarpd ") || !strings.Contains(out, "COUNTER") {
		t.Errorf("status output:\n%s", out)
	}

	s := openRawSession(t, sock)

	out, stderr, code = runCtl(t, ctl, "-socket", sock, "-json")
	if code != 0 {
		t.Fatalf("status -json: exit %d, stderr %q", code, stderr)
	}
	var in proto.Inspect
	if err := json.Unmarshal([]byte(out), &in); err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	if in.PID <= 0 || in.Device.Name == "" || in.Counters == nil {
		t.Errorf("status -json: pid %d, device %q, counters %v", in.PID, in.Device.Name, in.Counters)
	}
	var mine *proto.SessionInfo
	for i := range in.Sessions {
		if in.Sessions[i].Client == "ctl-test" {
			mine = &in.Sessions[i]
		}
	}
	if mine == nil {
		t.Fatalf("the test's session is not listed: %+v", in.Sessions)
	}
	if mine.PID != int32(os.Getpid()) || mine.UID != uint32(os.Getuid()) || mine.PDs != 1 ||
		len(mine.CQs) != 1 || len(mine.MRs) != 1 || len(mine.QPs) != 1 || mine.RegBytes != 8192 {
		t.Errorf("session = %+v", *mine)
	}

	var qps []qpRow
	out, _, code = runCtl(t, ctl, "-socket", sock, "-json", "qps")
	if err := json.Unmarshal([]byte(out), &qps); code != 0 || err != nil {
		t.Fatalf("qps -json: exit %d, %v: %s", code, err, out)
	}
	found := false
	for _, q := range qps {
		if q.Addr == s.qpAddr {
			found = true
			if q.Type != "UD" || q.State != "RESET" || q.Session != mine.ID {
				t.Errorf("qp row = %+v", q)
			}
		}
	}
	if !found {
		t.Errorf("QP %s not listed: %+v", s.qpAddr, qps)
	}

	out, _, code = runCtl(t, ctl, "-socket", sock, "qps")
	if code != 0 || !strings.Contains(out, s.qpAddr) || !strings.Contains(out, "UD") {
		t.Errorf("qps text (exit %d):\n%s", code, out)
	}
	for _, cmd := range []string{"device", "sessions", "cqs", "mrs", "counters"} {
		out, stderr, code := runCtl(t, ctl, "-socket", sock, cmd)
		if code != 0 || out == "" {
			t.Errorf("%s: exit %d, stderr %q", cmd, code, stderr)
		}
	}
	out, _, _ = runCtl(t, ctl, "-socket", sock, "mrs")
	if !strings.Contains(out, "8192") || !strings.Contains(out, "local-write") {
		t.Errorf("mrs text:\n%s", out)
	}
}
