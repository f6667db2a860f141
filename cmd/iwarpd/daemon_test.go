package main

import (
	"bytes"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/iwarpd/iwarpd/proto"
	"github.com/iwarpd/iwarpd/test/daemontest"
	vcfg "github.com/iwarpd/iwarpd/verbsd/config"
	"github.com/iwarpd/iwarpd/verbsd/verbsdtest"
	"github.com/sirupsen/logrus"
)

// The daemon's end-to-end tests start it through test/daemontest (built
// once per test binary by TestMain). Their UD ports are 26300-26499, this
// package's own block: below the kernel's ephemeral range (32768-60999),
// which other tests' unbound sockets draw from, and named by no other
// package's tests (the port map: test/daemontest doc.go; any daemon skips a
// port in use).

func TestMain(m *testing.M) { os.Exit(daemontest.Main(m, nil)) }

func isSocket(path string) bool {
	fi, err := os.Lstat(path)
	return err == nil && fi.Mode()&os.ModeSocket != 0
}

func TestDaemonLifecycle(t *testing.T) {
	bin := daemontest.Bins["iwarpd"]
	sock := filepath.Join(t.TempDir(), "run", "iwarpd.sock")

	first := daemontest.Start(t, "iwarpd", daemontest.Options{Sock: sock, Ports: "26300-26349", Extra: []string{"-socket-mode", "0600"}})
	fi, err := os.Stat(sock)
	if err != nil {
		t.Fatal(err)
	}
	if got := fi.Mode().Perm(); got != 0o600 {
		t.Errorf("socket mode = %#o, want 0600", got)
	}
	conn, err := net.Dial("unixpacket", sock)
	if err != nil {
		t.Fatalf("dialing the live daemon: %v", err)
	}
	conn.Close()

	// A second daemon on the same socket refuses with a clear message and
	// leaves the first one's socket alone.
	out, err := exec.Command(bin, "-socket", sock).CombinedOutput()
	if err == nil {
		t.Fatal("second daemon started on a live socket")
	}
	if !strings.Contains(string(out), "already serving this socket") {
		t.Errorf("second daemon's message does not say why: %s", out)
	}
	if !isSocket(sock) {
		t.Fatal("second daemon removed the live daemon's socket")
	}

	// SIGTERM: clean exit, socket removed.
	first.Signal(t, syscall.SIGTERM)
	if err := first.Wait(t); err != nil {
		t.Fatalf("daemon exit after SIGTERM: %v\n%s", err, first.Stderr)
	}
	if _, err := os.Lstat(sock); !os.IsNotExist(err) {
		t.Errorf("socket still present after SIGTERM: %v", err)
	}
	if !strings.Contains(first.Stderr.String(), "iwarpd stopped") {
		t.Errorf("log does not record the shutdown:\n%s", first.Stderr)
	}
}

func TestDaemonReplacesStaleSocket(t *testing.T) {
	sock := filepath.Join(t.TempDir(), "iwarpd.sock")
	// A socket file nobody listens on, as a killed daemon leaves behind.
	l, err := net.ListenUnix("unixpacket", &net.UnixAddr{Name: sock, Net: "unixpacket"})
	if err != nil {
		t.Fatal(err)
	}
	l.SetUnlinkOnClose(false)
	l.Close()
	if !isSocket(sock) {
		t.Fatal("stale socket not created")
	}
	d := daemontest.Start(t, "iwarpd", daemontest.Options{Sock: sock, Ports: "26350-26399"})
	conn, err := net.Dial("unixpacket", sock)
	if err != nil {
		t.Fatalf("daemon did not replace the stale socket: %v", err)
	}
	conn.Close()
	d.Signal(t, syscall.SIGINT)
	if err := d.Wait(t); err != nil {
		t.Fatalf("exit after SIGINT: %v", err)
	}
}

func TestDaemonRefusesNonSocketPath(t *testing.T) {
	bin := daemontest.Bins["iwarpd"]
	path := filepath.Join(t.TempDir(), "iwarpd.sock")
	if err := os.WriteFile(path, []byte("not a socket"), 0o644); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(bin, "-socket", path).CombinedOutput()
	if err == nil || !strings.Contains(string(out), "is not a socket") {
		t.Fatalf("want refusal naming the problem, got err=%v out=%s", err, out)
	}
	if b, _ := os.ReadFile(path); string(b) != "not a socket" {
		t.Fatal("daemon clobbered a regular file")
	}
}

func TestConfigFlagsAndEnvironment(t *testing.T) {
	env := map[string]string{"IWARPD_SOCKET": "/tmp/x.sock", "IWARPD_LOG_LEVEL": "debug", "IWARPD_LOG_FORMAT": "json"}
	getenv := func(k string) string { return env[k] }
	var usage bytes.Buffer
	cfg, err := parseConfig([]string{"-log-level", "warn"}, getenv, &usage)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Socket != "/tmp/x.sock" || cfg.LogLevel.String() != "warning" || cfg.LogFormat != "json" || cfg.SocketMode != 0o660 {
		t.Fatalf("cfg = %+v (flag must win over env, env over default)", cfg)
	}
	bad := [][]string{
		{"-socket-mode", "999"},
		{"-log-format", "xml"},
		{"-log-level", "loud"},
		{"-socket", ""},
		{"stray"},
	}
	for _, args := range bad {
		if _, err := parseConfig(args, func(string) string { return "" }, &usage); err == nil {
			t.Errorf("parseConfig(%q) accepted bad input", args)
		}
	}
	if _, err := parseConfig(nil, func(k string) string {
		if k == "IWARPD_LOG_FORMAT" {
			return "yaml"
		}
		return ""
	}, &usage); err == nil || !strings.Contains(err.Error(), "IWARPD_LOG_FORMAT") {
		t.Errorf("bad environment value not reported by name: %v", err)
	}
}

func TestConfigFileAndPrecedence(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "iwarpd.json")
	os.WriteFile(file, []byte(`{"socket": "/from/file.sock", "max-qp": 7, "ud-ports": "18000-18099",
		"poll-window": "20us", "datagram-size": 9000, "log-level": "error", "max-registered-bytes": "64M"}`), 0o644)
	env := map[string]string{"IWARPD_CONFIG": file, "IWARPD_MAX_QP": "9", "IWARPD_LOG_LEVEL": "debug"}
	var usage bytes.Buffer
	cfg, err := parseConfig([]string{"-log-level", "warn", "-poll-batch", "8"}, func(k string) string { return env[k] }, &usage)
	if err != nil {
		t.Fatal(err)
	}
	v := cfg.Verbs
	switch {
	case cfg.Socket != "/from/file.sock": // file over default
		t.Errorf("socket %q", cfg.Socket)
	case v.Limits.MaxQP != 9: // env over file
		t.Errorf("max-qp %d", v.Limits.MaxQP)
	case cfg.LogLevel != logrus.WarnLevel: // flag over env
		t.Errorf("log level %v", cfg.LogLevel)
	case v.UDPorts.First != 18000 || v.UDPorts.Last != 18099 || v.DatagramSize != 9000 || v.PollWindow != 20*time.Microsecond:
		t.Errorf("file values not applied: %+v", v)
	case v.PollBatch != 8 || v.Limits.MaxRegistered != 64<<20 || v.Limits.MaxSGE != 60 || v.Limits.MaxInline != 256:
		t.Errorf("values %+v", v)
	case v.Idle != vcfg.IdleAdaptive || v.IdleSleep != time.Microsecond: // the wait discipline's defaults
		t.Errorf("values %+v", v)
	case v.Addr.String() != "127.0.0.1" || v.RDPorts.First != 17500:
		t.Errorf("defaults %+v", v)
	}
	for _, bad := range []string{`{"no-such-flag": 1}`, `{"max-qp": "many"}`, `not json`, `{"datagram-size": 70000}`} {
		os.WriteFile(file, []byte(bad), 0o644)
		if _, err := parseConfig([]string{"-config", file}, func(string) string { return "" }, &usage); err == nil {
			t.Errorf("config file %s accepted", bad)
		}
	}
	for _, args := range [][]string{{"-ud-ports", "5-1"}, {"-addr", "nope"}, {"-poll-window", "fast"}, {"-max-sge", "0"},
		{"-ud-ports", "17000-17600"}, {"-socket-group", "no-such-group-iwarpd"}, {"-idle", "spin"}, {"-idle-sleep", "2ms"},
		{"-idle-sleep", "0s"}} {
		if _, err := parseConfig(args, func(string) string { return "" }, &usage); err == nil {
			t.Errorf("parseConfig(%q) accepted bad input", args)
		}
	}
	usage.Reset()
	parseConfig([]string{"-h"}, func(string) string { return "" }, &usage)
	for _, want := range []string{"-max-qp", "IWARPD_MAX_QP", "-poll-window", "-socket-group", "-config", "-ud-ports", "-datagram-size",
		"-idle", "-idle-sleep"} {
		if !strings.Contains(usage.String(), want) {
			t.Errorf("iwarpd -h does not mention %s", want)
		}
	}
}

// TestTwoDaemonsExchange runs two real daemons and moves Send messages
// between their clients over UDP, then stops one with SIGTERM.
func TestTwoDaemonsExchange(t *testing.T) {
	const base = 26300 // the package's UD ports (TestMain)
	sockA := filepath.Join(t.TempDir(), "a.sock")
	sockB := filepath.Join(t.TempDir(), "b.sock")
	dA := daemontest.Start(t, "iwarpd", daemontest.Options{Sock: sockA, Ports: fmt.Sprintf("%d-%d", base, base+99), Extra: []string{"-rd-ports", "0-0"}})
	daemontest.Start(t, "iwarpd", daemontest.Options{Sock: sockB, Ports: fmt.Sprintf("%d-%d", base+100, base+199), Extra: []string{"-rd-ports", "0-0"}})
	type side struct {
		c  *verbsdtest.Client
		pd uint32
		mr *verbsdtest.MR
		cq *verbsdtest.CQ
		qp *verbsdtest.QP
	}
	open := func(sock string) *side {
		c, err := verbsdtest.Dial(sock, false)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(c.Close)
		s := &side{c: c}
		if s.pd, err = c.AllocPD(); err != nil {
			t.Fatal(err)
		}
		if s.mr, err = c.RegMR(s.pd, 1<<20, proto.AccessLocalWrite); err != nil {
			t.Fatal(err)
		}
		if s.cq, err = c.CreateCQ(4096, 0); err != nil {
			t.Fatal(err)
		}
		caps := proto.QPCaps{MaxSendWR: 1024, MaxRecvWR: 1024, MaxSendSGE: 2, MaxRecvSGE: 2, MaxInline: 64}
		if s.qp, err = c.CreateQP(s.pd, s.cq, s.cq, caps, verbsdtest.QPOptions{}); err != nil {
			t.Fatal(err)
		}
		if err := s.qp.ToRTS(); err != nil {
			t.Fatal(err)
		}
		return s
	}
	a, b := open(sockA), open(sockB)
	ah, err := a.c.CreateAH(a.pd, b.qp.Addr)
	if err != nil {
		t.Fatal(err)
	}
	// 1000 small messages, in windows the receiver has posted for.
	const n, window = 1000, 256
	for i := range 200000 {
		a.mr.Buf[i] = byte(i * 31)
	}
	recvd := 0
	for sent := 0; sent < n; {
		for i := range window {
			b.c.PostRecv(b.qp.RQ, uint64(sent+i), []proto.SGE{b.mr.SGE((i%window)*64, 64)})
		}
		for i := range window {
			for a.qp.PostSend(proto.SQE{WRID: uint64(sent + i), AH: ah}, []proto.SGE{a.mr.SGE(i, 64)}, nil) != nil {
				time.Sleep(10 * time.Microsecond)
			}
		}
		got := b.cq.Wait(window, daemontest.Scaled(20*time.Second))
		for _, e := range got {
			if e.Status != proto.WCSuccess || e.ByteLen != 64 {
				t.Fatalf("completion %+v", e)
			}
			i := int(e.WRID) - sent
			if !bytes.Equal(b.mr.Buf[(i%window)*64:(i%window)*64+64], a.mr.Buf[i:i+64]) {
				t.Fatalf("message %d corrupted", e.WRID)
			}
		}
		recvd += len(got)
		sent += window
		if len(got) < window {
			break
		}
	}
	// Loopback UDP between two processes may drop under load; demand most.
	if recvd < n*9/10 {
		t.Fatalf("received %d of %d messages", recvd, n)
	}
	// One large multi-datagram message.
	b.c.PostRecv(b.qp.RQ, 999999, []proto.SGE{b.mr.SGE(0, 1<<20)})
	a.qp.PostSend(proto.SQE{WRID: 7, AH: ah, Flags: proto.SendSolicited}, []proto.SGE{a.mr.SGE(0, 200000)}, nil)
	big := b.cq.Wait(1, daemontest.Scaled(20*time.Second))
	for len(big) == 1 && big[0].WRID != 999999 { // a late small one
		big = b.cq.Wait(1, daemontest.Scaled(20*time.Second))
	}
	if len(big) != 1 || big[0].Status != proto.WCSuccess || big[0].ByteLen != 200000 || !bytes.Equal(b.mr.Buf[:200000], a.mr.Buf[:200000]) {
		t.Fatalf("large message: %+v", big)
	}
	// SIGTERM: the client is told, then disconnected.
	dA.Signal(t, syscall.SIGTERM)
	a.c.Conn.UnixConn().SetReadDeadline(time.Now().Add(daemontest.Scaled(20 * time.Second)))
	h, body, _, err := a.c.Conn.Receive()
	var ev proto.Event
	if err != nil || h.Op != proto.OpEvent || proto.Unmarshal(body, &ev) != nil || ev.Type != proto.EventDeviceFatal {
		t.Fatalf("after SIGTERM: %+v %s %v", h, body, err)
	}
	if _, _, _, err := a.c.Conn.Receive(); err == nil {
		t.Fatal("connection open after device-fatal")
	}
	if err := dA.Wait(t); err != nil {
		t.Fatalf("daemon exit: %v", err)
	}
}
