package pcapgen

import (
	"bytes"
	"encoding/binary"
	"errors"
	"io"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/google/gopacket"
	"github.com/google/gopacket/layers"
	"github.com/google/gopacket/pcapgo"
)

var (
	cli = netip.MustParseAddrPort("127.0.0.1:40000")
	srv = netip.MustParseAddrPort("127.0.0.2:21000")
)

// frame is one decoded capture frame.
type frame struct {
	ci  gopacket.CaptureInfo
	raw []byte
	ip  *layers.IPv4
	tcp *layers.TCP
	udp *layers.UDP
}

// readAll decodes every frame of a pcap stream.
func readAll(t *testing.T, b []byte) []frame {
	t.Helper()
	r, err := pcapgo.NewReader(bytes.NewReader(b))
	if err != nil {
		t.Fatalf("pcapgo.NewReader: %v", err)
	}
	if r.LinkType() != layers.LinkTypeEthernet {
		t.Fatalf("link type %v, want Ethernet", r.LinkType())
	}
	var out []frame
	for {
		data, ci, err := r.ReadPacketData()
		if err == io.EOF {
			return out
		}
		if err != nil {
			t.Fatalf("ReadPacketData: %v", err)
		}
		p := gopacket.NewPacket(data, layers.LayerTypeEthernet, gopacket.Default)
		if el := p.ErrorLayer(); el != nil {
			t.Fatalf("frame %d: decode error: %v", len(out)+1, el.Error())
		}
		f := frame{ci: ci, raw: data}
		if l, ok := p.Layer(layers.LayerTypeIPv4).(*layers.IPv4); ok {
			f.ip = l
		}
		if l, ok := p.Layer(layers.LayerTypeTCP).(*layers.TCP); ok {
			f.tcp = l
		}
		if l, ok := p.Layer(layers.LayerTypeUDP).(*layers.UDP); ok {
			f.udp = l
		}
		out = append(out, f)
	}
}

// onesSum is the Internet checksum accumulation (RFC 1071) of b into s.
func onesSum(s uint32, b []byte) uint32 {
	for len(b) >= 2 {
		s += uint32(binary.BigEndian.Uint16(b))
		b = b[2:]
	}
	if len(b) == 1 {
		s += uint32(b[0]) << 8
	}
	return s
}

func fold(s uint32) uint16 {
	for s > 0xffff {
		s = s&0xffff + s>>16
	}
	return uint16(s)
}

// checkChecksums verifies the IPv4 header checksum and the TCP/UDP checksum
// (with pseudo-header) of a raw Ethernet frame independently of gopacket.
func checkChecksums(t *testing.T, i int, raw []byte) {
	t.Helper()
	ipHdr := raw[EthernetHeaderLen:]
	ihl := int(ipHdr[0]&0x0f) * 4
	if got := fold(onesSum(0, ipHdr[:ihl])); got != 0xffff {
		t.Errorf("frame %d: IPv4 header checksum does not verify (sum %#x)", i, got)
	}
	total := int(binary.BigEndian.Uint16(ipHdr[2:4]))
	if EthernetHeaderLen+total != len(raw) {
		t.Errorf("frame %d: IPv4 total length %d, frame %d", i, total, len(raw))
	}
	l4 := ipHdr[ihl:total]
	pseudo := make([]byte, 0, 12)
	pseudo = append(pseudo, ipHdr[12:20]...)
	pseudo = append(pseudo, 0, ipHdr[9])
	pseudo = binary.BigEndian.AppendUint16(pseudo, uint16(len(l4)))
	if got := fold(onesSum(onesSum(0, pseudo), l4)); got != 0xffff {
		t.Errorf("frame %d: L4 checksum (proto %d) does not verify (sum %#x)", i, ipHdr[9], got)
	}
}

func mssOf(tcp *layers.TCP) (int, bool) {
	for _, o := range tcp.Options {
		if o.OptionType == layers.TCPOptionKindMSS && len(o.OptionData) == 2 {
			return int(binary.BigEndian.Uint16(o.OptionData)), true
		}
	}
	return 0, false
}

// pattern returns n deterministic payload octets.
func pattern(n int, seed byte) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = seed + byte(i*7)
	}
	return b
}

// checkTCP walks the frames of one conversation and checks the handshake,
// sequence/ack continuity per direction, the MSS bound and the teardown; it
// returns the reassembled stream of each direction and the data segment sizes.
func checkTCP(t *testing.T, frames []frame, mss int) (stream [2][]byte, sizes [2][]int) {
	t.Helper()
	if len(frames) < 7 {
		t.Fatalf("only %d frames", len(frames))
	}
	dirOf := func(f frame) Dir {
		if uint16(f.tcp.SrcPort) == cli.Port() {
			return ClientToServer
		}
		return ServerToClient
	}
	var nxt [2]uint32
	var fin [2]bool
	for i, f := range frames {
		if f.tcp == nil {
			t.Fatalf("frame %d is not TCP", i+1)
		}
		checkChecksums(t, i+1, f.raw)
		d := dirOf(f)
		tcp := f.tcp
		switch i {
		case 0:
			if !tcp.SYN || tcp.ACK || d != ClientToServer {
				t.Fatalf("frame 1 is not the client's SYN: %+v", tcp)
			}
		case 1:
			if !tcp.SYN || !tcp.ACK || d != ServerToClient {
				t.Fatalf("frame 2 is not the server's SYN-ACK")
			}
			if tcp.Ack != nxt[ClientToServer] {
				t.Errorf("SYN-ACK acks %d, want %d", tcp.Ack, nxt[ClientToServer])
			}
		default:
			if tcp.SYN || !tcp.ACK {
				t.Errorf("frame %d: SYN=%v ACK=%v after the handshake", i+1, tcp.SYN, tcp.ACK)
			}
		}
		if tcp.SYN {
			got, ok := mssOf(tcp)
			if !ok || got != mss {
				t.Errorf("frame %d: SYN MSS option %d (present %v), want %d", i+1, got, ok, mss)
			}
			nxt[d] = tcp.Seq + 1
			continue
		}
		if tcp.Seq != nxt[d] {
			t.Errorf("frame %d (%v): seq %d, want %d", i+1, d, tcp.Seq, nxt[d])
		}
		if tcp.Ack != nxt[d.Reverse()] {
			t.Errorf("frame %d (%v): ack %d, want %d", i+1, d, tcp.Ack, nxt[d.Reverse()])
		}
		if n := len(tcp.Payload); n > 0 {
			if fin[d] {
				t.Errorf("frame %d: data after FIN", i+1)
			}
			if n > mss {
				t.Errorf("frame %d: %d payload octets > MSS %d", i+1, n, mss)
			}
			stream[d] = append(stream[d], tcp.Payload...)
			sizes[d] = append(sizes[d], n)
		}
		nxt[d] += uint32(len(tcp.Payload))
		if tcp.FIN {
			fin[d] = true
			nxt[d]++
		}
	}
	if !fin[0] || !fin[1] {
		t.Errorf("teardown incomplete: FIN %v", fin)
	}
	last := frames[len(frames)-1].tcp
	if last.FIN || len(last.Payload) != 0 || last.Ack != nxt[dirOf(frames[len(frames)-1]).Reverse()] {
		t.Errorf("last frame is not the final ACK of the teardown: %+v", last)
	}
	return stream, sizes
}

func TestTCPConversation(t *testing.T) {
	tests := []struct {
		name      string
		mss       int
		c2s, s2c  []int // Write sizes
		wantSizes [2][]int
	}{
		{"small", 1460, []int{10}, []int{20}, [2][]int{{10}, {20}}},
		{"split", 100, []int{250}, []int{100, 1}, [2][]int{{100, 100, 50}, {100, 1}}},
		{"exact-mss", 536, []int{536, 1072}, nil, [2][]int{{536, 536, 536}, nil}},
		{"big-window", MaxMSS, []int{200000}, nil, [2][]int{{MaxMSS, MaxMSS, MaxMSS, 200000 - 3*MaxMSS}, nil}},
		{"many", 1460, []int{100000}, []int{3000}, [2][]int{nil, {1460, 1460, 80}}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var buf bytes.Buffer
			w, err := NewWriter(&buf, Options{})
			if err != nil {
				t.Fatal(err)
			}
			c, err := w.OpenTCP(TCPConfig{Client: cli, Server: srv, MSS: tc.mss})
			if err != nil {
				t.Fatal(err)
			}
			var want [2][]byte
			seed := byte(1)
			for i := 0; i < max(len(tc.c2s), len(tc.s2c)); i++ {
				if i < len(tc.c2s) {
					p := pattern(tc.c2s[i], seed)
					want[0] = append(want[0], p...)
					if err := c.Write(ClientToServer, p); err != nil {
						t.Fatal(err)
					}
				}
				if i < len(tc.s2c) {
					p := pattern(tc.s2c[i], seed+100)
					want[1] = append(want[1], p...)
					if err := c.Write(ServerToClient, p); err != nil {
						t.Fatal(err)
					}
				}
				seed++
			}
			if got := c.Sent(ClientToServer); got != uint64(len(want[0])) {
				t.Errorf("Sent(c2s) = %d, want %d", got, len(want[0]))
			}
			if err := c.Close(ClientToServer); err != nil {
				t.Fatal(err)
			}
			if err := c.Write(ClientToServer, []byte{1}); !errors.Is(err, ErrClosed) {
				t.Errorf("Write after Close: %v, want ErrClosed", err)
			}
			frames := readAll(t, buf.Bytes())
			if len(frames) != w.Frames() {
				t.Errorf("read %d frames, writer says %d", len(frames), w.Frames())
			}
			stream, sizes := checkTCP(t, frames, tc.mss)
			for d := range 2 {
				if !bytes.Equal(stream[d], want[d]) {
					t.Errorf("%v stream differs (%d vs %d octets)", Dir(d), len(stream[d]), len(want[d]))
				}
				if tc.wantSizes[d] != nil && !slices.Equal(sizes[d], tc.wantSizes[d]) {
					t.Errorf("%v segment sizes %v, want %v", Dir(d), sizes[d], tc.wantSizes[d])
				}
				for _, n := range sizes[d] {
					if n > tc.mss {
						t.Errorf("segment of %d > MSS", n)
					}
				}
			}
			// Never fill the receiver's window between ACKs.
			var flight [2]int
			for _, f := range frames {
				d := ClientToServer
				if uint16(f.tcp.SrcPort) == srv.Port() {
					d = ServerToClient
				}
				if len(f.tcp.Payload) == 0 && f.tcp.ACK {
					flight[d.Reverse()] = 0
				}
				flight[d] += len(f.tcp.Payload)
				if flight[d] >= DefaultWindow {
					t.Fatalf("%v: %d octets in flight fill the window", d, flight[d])
				}
			}
		})
	}
}

func TestWriteSegmentsBoundaries(t *testing.T) {
	var buf bytes.Buffer
	w, err := NewWriter(&buf, Options{})
	if err != nil {
		t.Fatal(err)
	}
	c, err := w.OpenTCP(TCPConfig{Client: cli, Server: srv, MSS: 1000, ClientISN: 0xffff_fff0, AckEvery: 3})
	if err != nil {
		t.Fatal(err)
	}
	segs := [][]byte{pattern(1, 1), pattern(1000, 2), pattern(7, 3), pattern(999, 4), pattern(40, 5)}
	if err := c.WriteSegments(ClientToServer, segs...); err != nil {
		t.Fatal(err)
	}
	if err := c.WriteSegments(ServerToClient, pattern(3, 9)); err != nil {
		t.Fatal(err)
	}
	if err := c.WriteSegments(ClientToServer, pattern(1001, 1)); !errors.Is(err, ErrSegmentTooLarge) {
		t.Errorf("oversized segment: %v, want ErrSegmentTooLarge", err)
	}
	if err := c.WriteSegments(ClientToServer, nil); !errors.Is(err, ErrEmptySegment) {
		t.Errorf("empty segment: %v, want ErrEmptySegment", err)
	}
	if err := c.Close(ServerToClient); err != nil {
		t.Fatal(err)
	}
	frames := readAll(t, buf.Bytes())
	_, sizes := checkTCP(t, frames, 1000) // seq wraps past 2^32 here
	if want := []int{1, 1000, 7, 999, 40}; !slices.Equal(sizes[0], want) {
		t.Errorf("client segment sizes %v, want %v", sizes[0], want)
	}
	if want := []int{3}; !slices.Equal(sizes[1], want) {
		t.Errorf("server segment sizes %v, want %v", sizes[1], want)
	}
	// PSH only on the last segment of each call.
	var psh []bool
	for _, f := range frames {
		if len(f.tcp.Payload) > 0 && uint16(f.tcp.SrcPort) == cli.Port() {
			psh = append(psh, f.tcp.PSH)
		}
	}
	if want := []bool{false, false, false, false, true}; !slices.Equal(psh, want) {
		t.Errorf("PSH flags %v, want %v", psh, want)
	}
}

func TestUDP(t *testing.T) {
	var buf bytes.Buffer
	w, err := NewWriter(&buf, Options{})
	if err != nil {
		t.Fatal(err)
	}
	a := netip.MustParseAddrPort("127.0.0.1:17000")
	b := netip.MustParseAddrPort("127.0.0.3:17001")
	payloads := [][]byte{pattern(1, 0), pattern(1472, 1), pattern(0, 2), pattern(65507, 3)}
	for _, p := range payloads {
		if err := w.WriteUDP(a, b, p); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.WriteUDP(a, b, pattern(65508, 0)); !errors.Is(err, ErrTooLarge) {
		t.Errorf("oversized datagram: %v, want ErrTooLarge", err)
	}
	frames := readAll(t, buf.Bytes())
	if len(frames) != len(payloads) {
		t.Fatalf("%d frames, want %d", len(frames), len(payloads))
	}
	for i, f := range frames {
		if f.udp == nil {
			t.Fatalf("frame %d is not UDP", i+1)
		}
		checkChecksums(t, i+1, f.raw)
		if f.udp.Checksum == 0 {
			t.Errorf("frame %d: UDP checksum not computed", i+1)
		}
		if uint16(f.udp.SrcPort) != a.Port() || uint16(f.udp.DstPort) != b.Port() {
			t.Errorf("frame %d: ports %d->%d", i+1, f.udp.SrcPort, f.udp.DstPort)
		}
		if !f.ip.SrcIP.Equal(a.Addr().AsSlice()) || !f.ip.DstIP.Equal(b.Addr().AsSlice()) {
			t.Errorf("frame %d: addresses %v->%v", i+1, f.ip.SrcIP, f.ip.DstIP)
		}
		if !bytes.Equal(f.udp.Payload, payloads[i]) {
			t.Errorf("frame %d: payload differs", i+1)
		}
		if want := DefaultStart.Add(DefaultStep * time.Duration(i)); !f.ci.Timestamp.Equal(want) {
			t.Errorf("frame %d: timestamp %v, want %v", i+1, f.ci.Timestamp, want)
		}
	}
}

func TestLoopbackOnly(t *testing.T) {
	w, err := NewWriter(io.Discard, Options{})
	if err != nil {
		t.Fatal(err)
	}
	bad := []netip.AddrPort{
		netip.MustParseAddrPort("10.0.0.1:1"),
		netip.MustParseAddrPort("128.0.0.1:1"),
		netip.MustParseAddrPort("[::1]:1"),
		{},
	}
	for _, ap := range bad {
		if _, err := w.OpenTCP(TCPConfig{Client: ap, Server: srv}); !errors.Is(err, ErrNotLoopback) {
			t.Errorf("OpenTCP client %v: %v, want ErrNotLoopback", ap, err)
		}
		if _, err := w.OpenTCP(TCPConfig{Client: cli, Server: ap}); !errors.Is(err, ErrNotLoopback) {
			t.Errorf("OpenTCP server %v: %v, want ErrNotLoopback", ap, err)
		}
		if err := w.WriteUDP(cli, ap, nil); !errors.Is(err, ErrNotLoopback) {
			t.Errorf("WriteUDP to %v: %v, want ErrNotLoopback", ap, err)
		}
	}
	if _, err := w.OpenTCP(TCPConfig{Client: cli, Server: srv, MSS: MaxMSS + 1}); !errors.Is(err, ErrBadConfig) {
		t.Errorf("MSS too large: %v, want ErrBadConfig", err)
	}
	if _, err := w.OpenTCP(TCPConfig{Client: cli, Server: cli}); !errors.Is(err, ErrBadConfig) {
		t.Errorf("same endpoints: %v, want ErrBadConfig", err)
	}
	if w.Frames() != 0 {
		t.Errorf("rejected configurations wrote %d frames", w.Frames())
	}
}

func TestDeterministicAndCreate(t *testing.T) {
	gen := func(w *Writer) {
		c, err := w.OpenTCP(TCPConfig{Client: cli, Server: srv})
		if err != nil {
			t.Fatal(err)
		}
		if err := c.Write(ClientToServer, pattern(5000, 1)); err != nil {
			t.Fatal(err)
		}
		if err := c.Close(ClientToServer); err != nil {
			t.Fatal(err)
		}
	}
	var a bytes.Buffer
	wa, err := NewWriter(&a, Options{})
	if err != nil {
		t.Fatal(err)
	}
	gen(wa)
	path := filepath.Join(t.TempDir(), "x.pcap")
	wb, err := Create(path, Options{})
	if err != nil {
		t.Fatal(err)
	}
	gen(wb)
	if err := wb.Close(); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(a.Bytes(), b) {
		t.Errorf("output is not deterministic (%d vs %d octets)", a.Len(), len(b))
	}
}
