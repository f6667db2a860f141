package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/gopacket"
	"github.com/google/gopacket/layers"
	"github.com/google/gopacket/pcapgo"

	"github.com/iwarpd/iwarpd/ddp"
	"github.com/iwarpd/iwarpd/internal/captures"
	"github.com/iwarpd/iwarpd/llp/dgram"
	"github.com/iwarpd/iwarpd/rdmap"
)

// capturesDir is shared/captures, or skips (internal/captures).
func capturesDir(t *testing.T) string { return captures.Dir(t) }

// writeUDPcap writes a pcap of two UD datagrams, the second with a bad CRC.
func writeUDPcap(t *testing.T, path string) {
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	w := pcapgo.NewWriter(f)
	if err := w.WriteFileHeader(65535, layers.LinkTypeEthernet); err != nil {
		t.Fatal(err)
	}
	for i := range 2 {
		h := ddp.Header{Last: true, Version: ddp.Version, ULPControl: uint8(rdmap.MakeControl(rdmap.OpSend)), MSN: uint32(i + 1)}
		ud := dgram.AppendUD(nil, dgram.Keys{QKey: 1, SrcQKey: 2}, true, h.Append(nil), []byte("payload"))
		if i == 1 {
			ud[len(ud)-1] ^= 1
		}
		eth := &layers.Ethernet{SrcMAC: net.HardwareAddr{2, 0, 0, 0, 0, 1}, DstMAC: net.HardwareAddr{2, 0, 0, 0, 0, 2}, EthernetType: layers.EthernetTypeIPv4}
		ip := &layers.IPv4{Version: 4, TTL: 64, Protocol: layers.IPProtocolUDP, SrcIP: net.IPv4(10, 0, 0, 1), DstIP: net.IPv4(10, 0, 0, 2)}
		u := &layers.UDP{SrcPort: 17001, DstPort: 17002}
		u.SetNetworkLayerForChecksum(ip)
		buf := gopacket.NewSerializeBuffer()
		if err := gopacket.SerializeLayers(buf, gopacket.SerializeOptions{FixLengths: true, ComputeChecksums: true}, eth, ip, u, gopacket.Payload(ud)); err != nil {
			t.Fatal(err)
		}
		ci := gopacket.CaptureInfo{Timestamp: time.Unix(100, int64(i)), CaptureLength: len(buf.Bytes()), Length: len(buf.Bytes())}
		if err := w.WritePacket(ci, buf.Bytes()); err != nil {
			t.Fatal(err)
		}
	}
}

func TestBinary(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binary")
	}
	dir := t.TempDir()
	bin := filepath.Join(dir, "iwarpdump")
	if out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	run := func(args ...string) (string, int) {
		var out bytes.Buffer
		cmd := exec.Command(bin, args...)
		cmd.Stdout = &out
		err := cmd.Run()
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			return out.String(), ee.ExitCode()
		}
		if err != nil {
			t.Fatal(err)
		}
		return out.String(), 0
	}
	bad := filepath.Join(dir, "ud-badcrc.pcap")
	writeUDPcap(t, bad)
	if out, code := run("-strict", bad); code != 1 || !strings.Contains(out, "VIOLATION frame 2: datagram CRC error") {
		t.Errorf("-strict on a bad CRC: exit %d, output:\n%s", code, out)
	}
	if _, code := run(bad); code != 0 {
		t.Errorf("without -strict: exit %d, want 0", code)
	}
	if _, code := run("-crc=false", "-strict", bad); code != 0 {
		t.Errorf("-crc=false -strict: exit %d, want 0", code)
	}
	if _, code := run("-strict", "-ud-ports", "1-2", bad); code != 0 {
		t.Errorf("other UD ports: exit %d, want 0", code)
	}
	if _, code := run("-strict", filepath.Join(dir, "missing.pcap")); code != 2 {
		t.Errorf("missing file: exit %d, want 2", code)
	}
	if _, code := run("-no-such-flag", bad); code != 2 {
		t.Errorf("bad flag: exit %d, want 2", code)
	}
	if _, code := run(); code != 2 {
		t.Errorf("no file: exit %d, want 2", code)
	}

	capture := filepath.Join(capturesDir(t), "rping-mpa2-crc.pcap")
	out, code := run("-strict", "-json", capture)
	if code != 0 {
		t.Fatalf("-strict -json on %s: exit %d\n%s", capture, code, out)
	}
	sc := bufio.NewScanner(strings.NewReader(out))
	kinds := map[string]int{}
	for sc.Scan() {
		var e struct {
			Kind  string `json:"kind"`
			Frame int    `json:"frame"`
			CRC   string `json:"crc"`
			DDP   *struct {
				MSN *uint32 `json:"msn"`
			} `json:"ddp"`
			RDMAP *struct {
				Name string `json:"name"`
			} `json:"rdmap"`
		}
		if err := json.Unmarshal(sc.Bytes(), &e); err != nil {
			t.Fatalf("bad JSON line %q: %v", sc.Text(), err)
		}
		kinds[e.Kind]++
		if e.Kind == "segment" && (e.CRC != "ok" || e.RDMAP == nil || e.DDP == nil) {
			t.Errorf("segment line %q", sc.Text())
		}
		if e.Frame == 8 && (e.RDMAP.Name != "Send" || *e.DDP.MSN != 1) {
			t.Errorf("frame 8: %q", sc.Text())
		}
	}
	if kinds["mpa-request"] != 1 || kinds["mpa-reply"] != 1 || kinds["segment"] != 21 || kinds["violation"] != 0 {
		t.Errorf("JSON kinds %v", kinds)
	}
	out, code = run(capture)
	if code != 0 || !strings.Contains(out, "10.0.2.15:34849 > 10.0.2.15:7174 MPA-FPDU Send qn=0 msn=1 mo=0 L len=16 crc=ok") {
		t.Errorf("text output (exit %d):\n%s", code, out)
	}
}
