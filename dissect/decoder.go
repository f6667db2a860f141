package dissect

import (
	"fmt"
	"net"
	"strconv"
	"time"

	"github.com/google/gopacket"
	"github.com/google/gopacket/layers"

	"github.com/iwarpd/iwarpd/llp/dgram"
)

// PortRange is an inclusive UDP port range (dgram.PortRange).
type PortRange = dgram.PortRange

// Config selects what the Decoder looks for.
type Config struct {
	UDPorts     PortRange // UDP ports carrying UD datagrams (source or destination)
	RDPorts     PortRange // UDP ports carrying RD datagrams
	DatagramCRC bool      // check the datagram CRC32c trailers
	MaxBuffered int       // out-of-order TCP bytes kept per direction; 0 = DefaultMaxBuffered
	// SkipMULPDU turns off the "FPDU fits the peer's MSS" check, for
	// captures taken behind a middlebox that rewrites the MSS option (qemu's
	// user-mode network, TCP proxies): there the MSS in the capture is not
	// the one the sender's socket had.
	SkipMULPDU bool
	File       string // copied into Event.File
}

// DefaultConfig returns the daemon's default ports, CRC checking on.
func DefaultConfig() Config {
	return Config{UDPorts: dgram.DefaultUDPorts, RDPorts: dgram.DefaultRDPorts, DatagramCRC: true}
}

// Decoder turns captured packets into Events. Feed packets in capture order
// with Packet, then call Close at the end of the capture. It is not safe for
// concurrent use.
type Decoder struct {
	cfg        Config
	emit       func(*Event)
	first      time.Time
	started    bool
	frame      int
	ts         time.Time
	conns      map[string]*tcpConn
	dgrams     map[string]*checker
	violations int
}

// NewDecoder returns a Decoder that passes every Event to emit.
func NewDecoder(cfg Config, emit func(*Event)) *Decoder {
	if cfg.MaxBuffered <= 0 {
		cfg.MaxBuffered = DefaultMaxBuffered
	}
	return &Decoder{cfg: cfg, emit: emit, conns: map[string]*tcpConn{}, dgrams: map[string]*checker{}}
}

// Violations returns the number of violation events emitted so far.
func (d *Decoder) Violations() int { return d.violations }

// Packet decodes one captured packet. frame is its 1-based index in the
// file; linkType is the capture's link type.
func (d *Decoder) Packet(frame int, ci gopacket.CaptureInfo, data []byte, linkType layers.LinkType) {
	if !d.started {
		d.started, d.first = true, ci.Timestamp
	}
	d.frame, d.ts = frame, ci.Timestamp
	pkt := gopacket.NewPacket(data, linkType, gopacket.DecodeOptions{Lazy: true, NoCopy: true})
	var src, dst net.IP
	switch n := pkt.NetworkLayer().(type) {
	case *layers.IPv4:
		if n.Flags&layers.IPv4MoreFragments != 0 || n.FragOffset != 0 {
			d.note(frame, "IPv4 fragment not reassembled")
			return
		}
		src, dst = n.SrcIP, n.DstIP
	case *layers.IPv6:
		src, dst = n.SrcIP, n.DstIP
	default:
		return
	}
	switch t := pkt.TransportLayer().(type) {
	case *layers.TCP:
		d.tcp(src, dst, t)
	case *layers.UDP:
		d.udp(src, dst, t)
	}
}

// Close ends the capture: buffered TCP data is flushed (holes reported) and
// unfinished state noted.
func (d *Decoder) Close() {
	for _, c := range sortedConns(d.conns) {
		c.close(d)
	}
}

func endpoint(ip net.IP, port uint16) string {
	return net.JoinHostPort(ip.String(), strconv.Itoa(int(port)))
}

func (d *Decoder) event(kind string) *Event {
	return &Event{Kind: kind, File: d.cfg.File, Frame: d.frame, Timestamp: d.ts, Time: d.ts.Sub(d.first).Seconds()}
}

func (d *Decoder) violation(frame int, format string, args ...any) {
	d.violations++
	e := d.event(KindViolation)
	e.Frame, e.Message = frame, fmt.Sprintf(format, args...)
	d.emit(e)
}

func (d *Decoder) note(frame int, format string, args ...any) {
	e := d.event(KindNote)
	e.Frame, e.Message = frame, fmt.Sprintf(format, args...)
	d.emit(e)
}

// report emits the findings of a checker for frame.
func (d *Decoder) report(frame int, fs []finding) {
	for _, f := range fs {
		if f.violation {
			d.violation(frame, "%s", f.msg)
		} else {
			d.note(frame, "%s", f.msg)
		}
	}
}
