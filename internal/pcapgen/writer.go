package pcapgen

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net/netip"
	"os"
	"time"

	"github.com/google/gopacket"
	"github.com/google/gopacket/layers"
	"github.com/google/gopacket/pcapgo"
)

// SnapLen is the snapshot length written in the pcap file header. Every frame
// pcapgen produces is captured whole (an IPv4 packet is at most 65535 octets).
const SnapLen = 262144

// DefaultStart is the timestamp of the first frame unless Options.Start says
// otherwise (a fixed instant keeps output byte-for-byte reproducible).
var DefaultStart = time.Date(2024, 1, 1, 0, 0, 0, 0, time.UTC)

// DefaultStep is the time between consecutive frames unless Options.Step says
// otherwise.
const DefaultStep = 10 * time.Microsecond

// Frame header sizes.
const (
	EthernetHeaderLen = 14
	IPv4HeaderLen     = 20
	TCPHeaderLen      = 20 // without options
	UDPHeaderLen      = 8
	maxIPv4Total      = 65535
)

// ErrNotLoopback is returned when an endpoint address is outside 127.0.0.0/8.
var ErrNotLoopback = errors.New("pcapgen: address is not in 127.0.0.0/8")

// ErrTooLarge is returned when a payload does not fit one IPv4 packet.
var ErrTooLarge = errors.New("pcapgen: payload does not fit one IPv4 packet")

var loopback = netip.MustParsePrefix("127.0.0.0/8")

// Options tune a Writer. The zero value is valid.
type Options struct {
	Start time.Time     // timestamp of the first frame; zero means DefaultStart
	Step  time.Duration // time between frames; zero means DefaultStep
}

// Writer writes Ethernet frames into a pcap stream. It is not safe for
// concurrent use.
type Writer struct {
	pw     *pcapgo.Writer
	closer io.Closer
	now    time.Time
	step   time.Duration
	ipID   uint16
	frames int
	buf    gopacket.SerializeBuffer
}

// NewWriter writes the pcap file header (link type Ethernet) to w and returns
// a Writer appending frames to it.
func NewWriter(w io.Writer, opt Options) (*Writer, error) {
	pw := pcapgo.NewWriter(w)
	if err := pw.WriteFileHeader(SnapLen, layers.LinkTypeEthernet); err != nil {
		return nil, fmt.Errorf("pcapgen: file header: %w", err)
	}
	start, step := opt.Start, opt.Step
	if start.IsZero() {
		start = DefaultStart
	}
	if step == 0 {
		step = DefaultStep
	}
	return &Writer{pw: pw, now: start, step: step, ipID: 1, buf: gopacket.NewSerializeBuffer()}, nil
}

// Create creates (or truncates) the file at path and returns a Writer on it;
// Close closes the file.
func Create(path string, opt Options) (*Writer, error) {
	f, err := os.Create(path)
	if err != nil {
		return nil, fmt.Errorf("pcapgen: %w", err)
	}
	w, err := NewWriter(f, opt)
	if err != nil {
		f.Close()
		return nil, err
	}
	w.closer = f
	return w, nil
}

// Close closes the underlying file when the Writer came from Create; it is a
// no-op for NewWriter.
func (w *Writer) Close() error {
	if w.closer == nil {
		return nil
	}
	err := w.closer.Close()
	w.closer = nil
	if err != nil {
		return fmt.Errorf("pcapgen: %w", err)
	}
	return nil
}

// Frames returns how many frames have been written.
func (w *Writer) Frames() int { return w.frames }

// checkLoopback rejects endpoints outside 127.0.0.0/8.
func checkLoopback(ap netip.AddrPort) error {
	if !ap.Addr().Is4() || !loopback.Contains(ap.Addr()) {
		return fmt.Errorf("%w: %v", ErrNotLoopback, ap)
	}
	return nil
}

// macFor derives a locally administered MAC address from a loopback address,
// so each endpoint has a stable, distinct link address.
func macFor(a netip.Addr) []byte {
	b := a.As4()
	return []byte{0x02, 0x00, b[0], b[1], b[2], b[3]}
}

// ipLayers returns the Ethernet and IPv4 layers for a packet from src to dst.
func (w *Writer) ipLayers(src, dst netip.Addr, proto layers.IPProtocol) (*layers.Ethernet, *layers.IPv4) {
	eth := &layers.Ethernet{
		SrcMAC:       macFor(src),
		DstMAC:       macFor(dst),
		EthernetType: layers.EthernetTypeIPv4,
	}
	s, d := src.As4(), dst.As4()
	ip := &layers.IPv4{
		Version:  4,
		IHL:      5,
		Id:       w.ipID,
		Flags:    layers.IPv4DontFragment,
		TTL:      64,
		Protocol: proto,
		SrcIP:    s[:],
		DstIP:    d[:],
	}
	w.ipID++
	return eth, ip
}

// emit serializes the layers with lengths fixed and checksums computed and
// writes the frame.
func (w *Writer) emit(ls ...gopacket.SerializableLayer) error {
	if err := w.buf.Clear(); err != nil {
		return fmt.Errorf("pcapgen: %w", err)
	}
	opts := gopacket.SerializeOptions{FixLengths: true, ComputeChecksums: true}
	if err := gopacket.SerializeLayers(w.buf, opts, ls...); err != nil {
		return fmt.Errorf("pcapgen: serialize: %w", err)
	}
	data := w.buf.Bytes()
	// gopacket pads Ethernet frames to the 60-octet minimum; a loopback
	// capture has no padding, and the IPv4 total length says where the
	// packet ends.
	if len(data) >= EthernetHeaderLen+IPv4HeaderLen {
		total := EthernetHeaderLen + int(binary.BigEndian.Uint16(data[EthernetHeaderLen+2:]))
		data = data[:min(total, len(data))]
	}
	ci := gopacket.CaptureInfo{Timestamp: w.now, CaptureLength: len(data), Length: len(data)}
	if err := w.pw.WritePacket(ci, data); err != nil {
		return fmt.Errorf("pcapgen: write frame %d: %w", w.frames+1, err)
	}
	w.now = w.now.Add(w.step)
	w.frames++
	return nil
}

// WriteUDP writes one Ethernet/IPv4/UDP frame carrying payload from src to
// dst, with the UDP checksum computed.
func (w *Writer) WriteUDP(src, dst netip.AddrPort, payload []byte) error {
	if err := checkLoopback(src); err != nil {
		return err
	}
	if err := checkLoopback(dst); err != nil {
		return err
	}
	if IPv4HeaderLen+UDPHeaderLen+len(payload) > maxIPv4Total {
		return fmt.Errorf("%w: UDP payload of %d octets", ErrTooLarge, len(payload))
	}
	eth, ip := w.ipLayers(src.Addr(), dst.Addr(), layers.IPProtocolUDP)
	udp := &layers.UDP{SrcPort: layers.UDPPort(src.Port()), DstPort: layers.UDPPort(dst.Port())}
	if err := udp.SetNetworkLayerForChecksum(ip); err != nil {
		return fmt.Errorf("pcapgen: %w", err)
	}
	return w.emit(eth, ip, udp, gopacket.Payload(payload))
}
