//go:build linux

package siwvm

import (
	"bytes"
	"encoding/base64"
	"strings"
	"testing"
)

func TestExitStatus(t *testing.T) {
	tests := []struct {
		name   string
		log    string
		want   int
		wantOK bool
	}{
		{"none", "iwarp-siw-vm: ready 2.3s\nhello\n", 0, false},
		{"zero", "iwarp-siw-vm: ready 2.3s\niwarp-siw-vm: exit 0\n[    2.36] reboot: Power down\n", 0, true},
		{"crlf", "iwarp-siw-vm: exit 134\r\n", 134, true},
		{"last wins", "iwarp-siw-vm: exit 1\niwarp-siw-vm: exit 7\n", 7, true},
		{"not at line start", "echo iwarp-siw-vm: exit 3\n", 0, false},
		{"garbage status", "iwarp-siw-vm: exit x\n", 0, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, ok := ExitStatus(tt.log)
			if got != tt.want || ok != tt.wantOK {
				t.Errorf("ExitStatus = %d, %v; want %d, %v", got, ok, tt.want, tt.wantOK)
			}
		})
	}
}

// emit mimics the guest's iwarp-emit: busybox base64 wraps at 76 columns,
// the serial console ends lines with CRLF.
func emit(name string, data []byte) string {
	enc := base64.StdEncoding.EncodeToString(data)
	var b strings.Builder
	b.WriteString("iwarp-siw-vm: file " + name + " begin\r\n")
	for len(enc) > 76 {
		b.WriteString(enc[:76] + "\r\n")
		enc = enc[76:]
	}
	b.WriteString(enc + "\r\n")
	b.WriteString("iwarp-siw-vm: file " + name + " end\r\n")
	return b.String()
}

func TestExtractFiles(t *testing.T) {
	pcap := bytes.Repeat([]byte{0xd4, 0xc3, 0xb2, 0xa1, 0x02, 0x00, 0x04, 0x00, 0x4d, 0x50}, 40)
	other := []byte("MPA ID Req Frame\x10\x02\x00\x04\x00\x01\x00\x01")
	e := emit("c.pcap", pcap)
	// A kernel message printed in the middle of the base64 must be skipped.
	lines := strings.SplitAfter(e, "\r\n")
	withKmsg := strings.Join(lines[:3], "") + "[    3.14] siw: some kernel message\r\n" + strings.Join(lines[3:], "")
	log := "iwarp-siw-vm: ready 2s\r\n" + withKmsg + "rping output\r\n" + emit("req.bin", other) + "iwarp-siw-vm: exit 0\r\n"

	files, err := ExtractFiles(log)
	if err != nil {
		t.Fatalf("ExtractFiles: %v", err)
	}
	if len(files) != 2 {
		t.Fatalf("got %d files, want 2", len(files))
	}
	if !bytes.Equal(files["c.pcap"], pcap) {
		t.Errorf("c.pcap = %x, want %x", files["c.pcap"], pcap)
	}
	if !bytes.Equal(files["req.bin"], other) {
		t.Errorf("req.bin = %q, want %q", files["req.bin"], other)
	}

	empty, err := ExtractFiles("iwarp-siw-vm: file e begin\niwarp-siw-vm: file e end\n")
	if err != nil || len(empty["e"]) != 0 {
		t.Errorf("empty file: %v, %v", empty, err)
	}
}

func TestExtractFilesErrors(t *testing.T) {
	for name, log := range map[string]string{
		"no end":        "iwarp-siw-vm: file a begin\nAAAA\n",
		"nested":        "iwarp-siw-vm: file a begin\niwarp-siw-vm: file b begin\n",
		"end mismatch":  "iwarp-siw-vm: file a begin\nAAAA\niwarp-siw-vm: file b end\n",
		"stray end":     "iwarp-siw-vm: file a end\n",
		"bad base64":    "iwarp-siw-vm: file a begin\nAAA\niwarp-siw-vm: file a end\n",
		"bad base64 #2": "iwarp-siw-vm: file a begin\nA===\niwarp-siw-vm: file a end\n",
	} {
		if files, err := ExtractFiles(log); err == nil {
			t.Errorf("%s: ExtractFiles = %v, want an error", name, files)
		}
	}
}

func TestForwardArg(t *testing.T) {
	if got := (Forward{HostPort: 17174, GuestPort: 7174}).arg(); got != "17174:7174" {
		t.Errorf("tcp arg = %q", got)
	}
	if got := (Forward{UDP: true, HostPort: 1, GuestPort: 2}).arg(); got != "udp:1:2" {
		t.Errorf("udp arg = %q", got)
	}
}

func TestAvailableNeedsEnable(t *testing.T) {
	t.Setenv(EnvEnable, "")
	if _, err := Available(); err == nil || !strings.Contains(err.Error(), EnvEnable) {
		t.Errorf("Available without %s = %v, want an error naming it", EnvEnable, err)
	}
	t.Setenv(EnvEnable, "1")
	t.Setenv(EnvCache, t.TempDir())
	if _, err := Available(); err == nil || !strings.Contains(err.Error(), "build.sh") {
		t.Errorf("Available with an empty cache = %v, want an error naming build.sh", err)
	}
}

func TestWithParamsCopies(t *testing.T) {
	g := Guest{Params: make([]string, 1, 4)}
	g.Params[0] = "mpa_version=2"
	a := g.WithParams("mpa_crc_required=1")
	b := g.WithParams("peer_to_peer=1")
	if strings.Join(a.Params, " ") != "mpa_version=2 mpa_crc_required=1" || strings.Join(b.Params, " ") != "mpa_version=2 peer_to_peer=1" {
		t.Errorf("WithParams shares storage: a=%v b=%v", a.Params, b.Params)
	}
}

func TestRunScriptFound(t *testing.T) {
	t.Setenv(EnvScripts, "")
	p, err := runScript()
	if err != nil {
		t.Fatalf("runScript: %v", err)
	}
	if !strings.HasSuffix(p, "scripts/siw-vm/run.sh") {
		t.Errorf("runScript = %q", p)
	}
}

func TestCaptureDrops(t *testing.T) {
	for _, c := range []struct {
		log  string
		want int
	}{
		{"2109 packets captured\n2320 packets received by filter\n211 packets dropped by kernel\n", 211},
		{"12 packets captured\n12 packets received by filter\n0 packets dropped by kernel\n", 0},
		{"no tcpdump here\n", 0},
	} {
		if got := captureDrops(c.log); got != c.want {
			t.Errorf("captureDrops(%q) = %d, want %d", c.log, got, c.want)
		}
	}
}
