package libfabric

import (
	"encoding/binary"
	"errors"
	"net"
	"net/netip"
	"sync"
	"syscall"
	"testing"
	"time"
)

// udpPacket is one IPv4 UDP datagram seen on an interface.
type udpPacket struct {
	src, dst netip.AddrPort
	payload  []byte
}

// udpCapture reads the IPv4 UDP datagrams an interface carries (an
// AF_PACKET socket, packet(7)), each once: on loopback the kernel shows
// every packet as sent (PACKET_OUTGOING) and as received; only the
// received copy is kept.
type udpCapture struct {
	fd   int
	stop chan struct{}
	done chan struct{}
	mu   sync.Mutex
	pkts []udpPacket
}

// captureUDP starts reading ifname's packets; t skips when the process may
// not open a packet socket (CAP_NET_RAW).
func captureUDP(t *testing.T, ifname string) *udpCapture {
	t.Helper()
	ifi, err := net.InterfaceByName(ifname)
	if err != nil {
		t.Fatalf("capture on %s: %v", ifname, err)
	}
	proto := int(htons(syscall.ETH_P_ALL))
	fd, err := syscall.Socket(syscall.AF_PACKET, syscall.SOCK_DGRAM, proto)
	if errors.Is(err, syscall.EPERM) || errors.Is(err, syscall.EACCES) {
		t.Skipf("capture on %s: packet socket: %v (needs CAP_NET_RAW)", ifname, err)
	}
	if err != nil {
		t.Fatalf("capture on %s: packet socket: %v", ifname, err)
	}
	if err := syscall.Bind(fd, &syscall.SockaddrLinklayer{Protocol: htons(syscall.ETH_P_ALL), Ifindex: ifi.Index}); err != nil {
		syscall.Close(fd)
		t.Fatalf("capture on %s: bind: %v", ifname, err)
	}
	tv := syscall.NsecToTimeval((100 * time.Millisecond).Nanoseconds()) // the loop looks at stop this often
	if err := syscall.SetsockoptTimeval(fd, syscall.SOL_SOCKET, syscall.SO_RCVTIMEO, &tv); err != nil {
		syscall.Close(fd)
		t.Fatalf("capture on %s: SO_RCVTIMEO: %v", ifname, err)
	}
	if err := syscall.SetsockoptInt(fd, syscall.SOL_SOCKET, syscall.SO_RCVBUF, 8<<20); err != nil {
		t.Logf("capture on %s: SO_RCVBUF: %v", ifname, err)
	}
	c := &udpCapture{fd: fd, stop: make(chan struct{}), done: make(chan struct{})}
	go c.loop()
	t.Cleanup(func() { c.end() })
	return c
}

func htons(v uint16) uint16 { return v<<8 | v>>8 }

func (c *udpCapture) loop() {
	defer close(c.done)
	buf := make([]byte, 65536)
	for {
		select {
		case <-c.stop:
			return
		default:
		}
		n, from, err := syscall.Recvfrom(c.fd, buf, 0)
		if err != nil {
			if errors.Is(err, syscall.EAGAIN) || errors.Is(err, syscall.EINTR) {
				continue
			}
			return
		}
		if ll, ok := from.(*syscall.SockaddrLinklayer); ok && ll.Pkttype == syscall.PACKET_OUTGOING {
			continue
		}
		if p, ok := parseUDP4(buf[:n]); ok {
			c.mu.Lock()
			c.pkts = append(c.pkts, p)
			c.mu.Unlock()
		}
	}
}

// end stops the capture and returns what it saw.
func (c *udpCapture) end() []udpPacket {
	select {
	case <-c.stop:
	default:
		close(c.stop)
		<-c.done
		syscall.Close(c.fd)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.pkts
}

// parseUDP4 decodes an IPv4 packet carrying a whole UDP datagram (RFC 791,
// RFC 768); fragments and other protocols are not.
func parseUDP4(b []byte) (udpPacket, bool) {
	if len(b) < 20 || b[0]>>4 != 4 || b[9] != syscall.IPPROTO_UDP {
		return udpPacket{}, false
	}
	ihl := int(b[0]&0xf) * 4
	total := int(binary.BigEndian.Uint16(b[2:]))
	if binary.BigEndian.Uint16(b[6:])&0x3fff != 0 || total > len(b) || ihl+8 > total {
		return udpPacket{}, false
	}
	u := b[ihl:total]
	ulen := int(binary.BigEndian.Uint16(u[4:]))
	if ulen < 8 || ulen > len(u) {
		return udpPacket{}, false
	}
	src := netip.AddrPortFrom(netip.AddrFrom4([4]byte(b[12:16])), binary.BigEndian.Uint16(u[0:]))
	dst := netip.AddrPortFrom(netip.AddrFrom4([4]byte(b[16:20])), binary.BigEndian.Uint16(u[2:]))
	return udpPacket{src: src, dst: dst, payload: append([]byte(nil), u[8:ulen]...)}, true
}
