package pcapgen

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net/netip"

	"github.com/google/gopacket"
	"github.com/google/gopacket/layers"
)

// Dir is the direction of a TCP segment within a conversation.
type Dir int

const (
	ClientToServer Dir = 0 // from the connecting side (TCP active open)
	ServerToClient Dir = 1 // from the listening side
)

// Reverse returns the opposite direction.
func (d Dir) Reverse() Dir { return 1 - d }

func (d Dir) String() string {
	if d == ClientToServer {
		return "client->server"
	}
	return "server->client"
}

// Defaults of TCPConfig.
const (
	DefaultMSS       = 1460
	DefaultWindow    = 65535
	DefaultAckEvery  = 2
	DefaultClientISN = 0x1000_0000
	DefaultServerISN = 0x2000_0000
	// MaxMSS is the largest MSS whose segments fit one IPv4 packet.
	MaxMSS = maxIPv4Total - IPv4HeaderLen - TCPHeaderLen
)

// Errors of TCPConversation.
var (
	ErrClosed          = errors.New("pcapgen: TCP conversation is closed")
	ErrSegmentTooLarge = errors.New("pcapgen: segment larger than the MSS")
	ErrEmptySegment    = errors.New("pcapgen: empty data segment")
	ErrBadConfig       = errors.New("pcapgen: bad TCP configuration")
)

// TCPConfig describes a TCP connection. Zero fields take the defaults above.
type TCPConfig struct {
	Client, Server netip.AddrPort // both in 127.0.0.0/8
	// MSS is the maximum segment size both ends advertise in their SYN; data
	// segments never exceed it. 1..MaxMSS.
	MSS int
	// ClientISN and ServerISN are the initial sequence numbers (zero means
	// the defaults; an ISN of exactly 0 cannot be requested).
	ClientISN, ServerISN uint32
	// Window is the receive window both ends advertise (no window scaling).
	// Senders never fill it: a pure ACK is emitted before a segment would.
	Window uint16
	// AckEvery is how many data segments a receiver lets pass before sending
	// a pure ACK (like delayed ACK). The end of every Write is acked too.
	AckEvery int
}

// TCPConversation writes one TCP connection into a capture: handshake on
// open, data with consistent sequence and acknowledgement numbers, FIN
// teardown on Close.
type TCPConversation struct {
	w      *Writer
	cfg    TCPConfig
	ep     [2]netip.AddrPort // indexed by Dir: the sender's endpoint
	nxt    [2]uint32         // next sequence number each side sends
	sent   [2]uint64         // payload octets sent per direction
	unack  [2]int            // data segments not yet acknowledged by the peer
	flight [2]int            // payload octets not yet acknowledged by the peer
	closed bool
}

// OpenTCP validates cfg, writes the three-way handshake (SYN and SYN-ACK
// with the MSS option, then ACK) and returns the conversation.
func (w *Writer) OpenTCP(cfg TCPConfig) (*TCPConversation, error) {
	if err := checkLoopback(cfg.Client); err != nil {
		return nil, err
	}
	if err := checkLoopback(cfg.Server); err != nil {
		return nil, err
	}
	if cfg.Client == cfg.Server {
		return nil, fmt.Errorf("%w: client and server are both %v", ErrBadConfig, cfg.Client)
	}
	if cfg.MSS == 0 {
		cfg.MSS = DefaultMSS
	}
	if cfg.MSS < 1 || cfg.MSS > MaxMSS {
		return nil, fmt.Errorf("%w: MSS %d outside 1..%d", ErrBadConfig, cfg.MSS, MaxMSS)
	}
	if cfg.Window == 0 {
		cfg.Window = DefaultWindow
	}
	if cfg.AckEvery <= 0 {
		cfg.AckEvery = DefaultAckEvery
	}
	if cfg.ClientISN == 0 {
		cfg.ClientISN = DefaultClientISN
	}
	if cfg.ServerISN == 0 {
		cfg.ServerISN = DefaultServerISN
	}
	c := &TCPConversation{w: w, cfg: cfg}
	c.ep[ClientToServer], c.ep[ServerToClient] = cfg.Client, cfg.Server
	c.nxt[ClientToServer], c.nxt[ServerToClient] = cfg.ClientISN, cfg.ServerISN

	mss := mssOption(cfg.MSS)
	if err := c.segment(ClientToServer, tcpFlags{syn: true}, nil, mss); err != nil {
		return nil, err
	}
	c.nxt[ClientToServer]++
	if err := c.segment(ServerToClient, tcpFlags{syn: true, ack: true}, nil, mss); err != nil {
		return nil, err
	}
	c.nxt[ServerToClient]++
	if err := c.segment(ClientToServer, tcpFlags{ack: true}, nil, nil); err != nil {
		return nil, err
	}
	return c, nil
}

// MSS returns the maximum segment size of the connection.
func (c *TCPConversation) MSS() int { return c.cfg.MSS }

// NextSeq returns the sequence number of the next octet sent in direction d.
func (c *TCPConversation) NextSeq(d Dir) uint32 { return c.nxt[d] }

// Sent returns how many payload octets have been sent in direction d (the
// stream offset of the next octet).
func (c *TCPConversation) Sent(d Dir) uint64 { return c.sent[d] }

// Endpoint returns the sending endpoint of direction d.
func (c *TCPConversation) Endpoint(d Dir) netip.AddrPort { return c.ep[d] }

// Write sends data in direction d, split into segments of at most MSS
// octets. The last segment carries PSH; the peer acknowledges every
// AckEvery segments and at the end. Writing nothing is a no-op.
func (c *TCPConversation) Write(d Dir, data []byte) error {
	if c.closed {
		return ErrClosed
	}
	for len(data) > 0 {
		n := min(len(data), c.cfg.MSS)
		if err := c.data(d, data[:n], n == len(data)); err != nil {
			return err
		}
		data = data[n:]
	}
	return c.ackPending(d)
}

// WriteSegments sends each element of segs as exactly one TCP segment in
// direction d (each non-empty and at most MSS octets), then has the peer
// acknowledge them.
func (c *TCPConversation) WriteSegments(d Dir, segs ...[]byte) error {
	if c.closed {
		return ErrClosed
	}
	for i, s := range segs {
		if len(s) == 0 {
			return fmt.Errorf("%w: segment %d", ErrEmptySegment, i)
		}
		if len(s) > c.cfg.MSS {
			return fmt.Errorf("%w: segment %d has %d octets, MSS %d", ErrSegmentTooLarge, i, len(s), c.cfg.MSS)
		}
	}
	for i, s := range segs {
		if err := c.data(d, s, i == len(segs)-1); err != nil {
			return err
		}
	}
	return c.ackPending(d)
}

// Close tears the connection down: first sends FIN, the peer acknowledges
// it and sends its own FIN, which first acknowledges.
func (c *TCPConversation) Close(first Dir) error {
	if c.closed {
		return ErrClosed
	}
	c.closed = true
	second := first.Reverse()
	if err := c.segment(first, tcpFlags{fin: true, ack: true}, nil, nil); err != nil {
		return err
	}
	c.nxt[first]++
	if err := c.segment(second, tcpFlags{ack: true}, nil, nil); err != nil {
		return err
	}
	if err := c.segment(second, tcpFlags{fin: true, ack: true}, nil, nil); err != nil {
		return err
	}
	c.nxt[second]++
	return c.segment(first, tcpFlags{ack: true}, nil, nil)
}

// data sends one data segment, acknowledging first if it would fill the
// peer's window and afterwards every AckEvery segments.
func (c *TCPConversation) data(d Dir, p []byte, push bool) error {
	if c.flight[d] > 0 && c.flight[d]+len(p) >= int(c.cfg.Window) {
		if err := c.ackPending(d); err != nil {
			return err
		}
	}
	if err := c.segment(d, tcpFlags{ack: true, psh: push}, p, nil); err != nil {
		return err
	}
	c.nxt[d] += uint32(len(p))
	c.sent[d] += uint64(len(p))
	c.unack[d]++
	c.flight[d] += len(p)
	if c.unack[d] >= c.cfg.AckEvery && !push {
		return c.ackPending(d)
	}
	return nil
}

// ackPending has the peer acknowledge everything sent in direction d.
func (c *TCPConversation) ackPending(d Dir) error {
	if c.unack[d] == 0 {
		return nil
	}
	c.unack[d], c.flight[d] = 0, 0
	return c.segment(d.Reverse(), tcpFlags{ack: true}, nil, nil)
}

type tcpFlags struct{ syn, ack, psh, fin bool }

// segment writes one TCP segment from the side of direction d. The
// acknowledgement number is everything the peer has sent so far.
func (c *TCPConversation) segment(d Dir, f tcpFlags, payload []byte, opts []layers.TCPOption) error {
	src, dst := c.ep[d], c.ep[d.Reverse()]
	eth, ip := c.w.ipLayers(src.Addr(), dst.Addr(), layers.IPProtocolTCP)
	tcp := &layers.TCP{
		SrcPort: layers.TCPPort(src.Port()),
		DstPort: layers.TCPPort(dst.Port()),
		Seq:     c.nxt[d],
		SYN:     f.syn,
		ACK:     f.ack,
		PSH:     f.psh,
		FIN:     f.fin,
		Window:  c.cfg.Window,
		Options: opts,
	}
	if f.ack {
		tcp.Ack = c.nxt[d.Reverse()]
	}
	if err := tcp.SetNetworkLayerForChecksum(ip); err != nil {
		return fmt.Errorf("pcapgen: %w", err)
	}
	return c.w.emit(eth, ip, tcp, gopacket.Payload(payload))
}

// mssOption returns the TCP MSS option (kind 2, length 4).
func mssOption(mss int) []layers.TCPOption {
	return []layers.TCPOption{{
		OptionType:   layers.TCPOptionKindMSS,
		OptionLength: 4,
		OptionData:   binary.BigEndian.AppendUint16(nil, uint16(mss)),
	}}
}
