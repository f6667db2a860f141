package ud

import (
	"fmt"
	"net/netip"
	"slices"

	"github.com/iwarpd/iwarpd/proto"
	"github.com/iwarpd/iwarpd/verbsd/rnic"
	"golang.org/x/sys/unix"
)

// UD multicast (docs/multicast.md). Attaching a UD QP to an IPv4 group
// opens one more socket for that (QP, group): bound to group:port with
// SO_REUSEADDR and SO_REUSEPORT (so that every QP of every process on the
// host can attach to the same group:port, each getting its own copy of
// every datagram, as the kernel delivers multicast to every matching
// socket), member of the group (IP_ADD_MEMBERSHIP) on the configured
// interface. The engine reads it in the QP's receive pass, with the same
// batched recvmmsg as the QP's own socket, and judges its datagrams like
// any other: a Send (or Write-Record) received on a group is delivered to
// the QP, except that no error message is ever sent about it. A QP sends to
// a group through an address handle whose address is the group's:
// its own socket gets IP_MULTICAST_TTL, IP_MULTICAST_LOOP and
// IP_MULTICAST_IF (Config.Mcast) the first time it does.

// maxMcastPerQP bounds the groups one QP is attached to.
const maxMcastPerQP = 16

type mcastSock struct {
	group netip.AddrPort
	fd    int
}

// mcastState is a QP's multicast side (engine-owned).
type mcastState struct {
	socks   []*mcastSock
	txReady bool // its socket has the multicast send options
}

// mcastSendOptions sets the multicast send options on q's socket. A
// failure is counted; the send then goes with the kernel's defaults.
func (e *Engine) mcastSendOptions(q *QP) {
	q.mcast.txReady = true
	mc := e.Cfg.Mcast
	loop := 1
	if mc.NoLoop {
		loop = 0
	}
	idx, ifaddr, _ := mc.McastInterface(e.Cfg.Addr)
	errs := []error{
		unix.SetsockoptInt(q.FD, unix.IPPROTO_IP, unix.IP_MULTICAST_TTL, mc.Ttl()),
		unix.SetsockoptInt(q.FD, unix.IPPROTO_IP, unix.IP_MULTICAST_LOOP, loop),
	}
	if idx != 0 || ifaddr != [4]byte{} {
		errs = append(errs, unix.SetsockoptIPMreqn(q.FD, unix.IPPROTO_IP, unix.IP_MULTICAST_IF,
			&unix.IPMreqn{Address: ifaddr, Ifindex: int32(idx)}))
	}
	for _, err := range errs {
		if err != nil {
			e.count(q, rnic.CSendErrors, 1)
		}
	}
}

// ParseGroup checks a group address: IPv4 multicast, port not 0.
func ParseGroup(s string) (netip.AddrPort, error) {
	g, err := netip.ParseAddrPort(s)
	if err != nil {
		return netip.AddrPort{}, rnic.Errf(unix.EINVAL, "multicast group %q: want a.b.c.d:port", s)
	}
	g = netip.AddrPortFrom(g.Addr().Unmap(), g.Port())
	if !g.Addr().Is4() || !g.Addr().IsMulticast() || g.Port() == 0 {
		return netip.AddrPort{}, rnic.Errf(unix.EINVAL, "multicast group %v: want an IPv4 multicast address and a port", g)
	}
	return g, nil
}

// AttachMcast attaches UD QP q to group (engine goroutine).
func AttachMcast(c *rnic.QP, group netip.AddrPort) error {
	q, ok := c.Ops.(*QP)
	if !ok || q.Type != proto.QPTypeUD {
		return rnic.Errf(unix.EINVAL, "attach-mcast: QP %d is %v, not UD", c.Handle, c.Type)
	}
	e := q.e
	if !e.Cfg.Addr.Is4() {
		return rnic.Errf(unix.EAFNOSUPPORT, "attach-mcast: the device address %v is not IPv4", e.Cfg.Addr)
	}
	for _, m := range q.mcast.socks {
		if m.group == group {
			return rnic.Errf(unix.EEXIST, "attach-mcast: QP %d is attached to %v already", q.Handle, group)
		}
	}
	if len(q.mcast.socks) >= maxMcastPerQP {
		return rnic.Errf(unix.ENOMEM, "attach-mcast: QP %d is attached to %d groups already", q.Handle, maxMcastPerQP)
	}
	fd, err := e.openMcast(group)
	if err != nil {
		return err
	}
	// A parked QP (ud/backlog.go) watches its new socket once unparked.
	if err := unix.EpollCtl(e.EpFD, unix.EPOLL_CTL_ADD, fd, &unix.EpollEvent{Events: q.interest(), Fd: int32(fd)}); err != nil {
		unix.Close(fd)
		return fmt.Errorf("verbsd: epoll_ctl: %w", err)
	}
	e.ByFD[int32(fd)] = q.QP
	q.mcast.socks = append(q.mcast.socks, &mcastSock{group: group, fd: fd})
	q.FastpathReclaim() // the group's datagrams take receives: the engine's (ud/fastpath.go)
	return nil
}

// openMcast opens a socket receiving group's datagrams.
func (e *Engine) openMcast(group netip.AddrPort) (int, error) {
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_NONBLOCK|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return -1, rnic.Errf(unix.ENOMEM, "attach-mcast: socket: %v", err)
	}
	fail := func(what string, err error) (int, error) {
		unix.Close(fd)
		if en, ok := err.(unix.Errno); ok {
			return -1, rnic.Errf(en, "attach-mcast: %s %v: %v", what, group, err)
		}
		return -1, rnic.Errf(unix.EINVAL, "attach-mcast: %s %v: %v", what, group, err)
	}
	for _, opt := range []int{unix.SO_REUSEADDR, unix.SO_REUSEPORT} {
		if err := unix.SetsockoptInt(fd, unix.SOL_SOCKET, opt, 1); err != nil {
			return fail("setsockopt", err)
		}
	}
	if e.Cfg.SocketBuffer > 0 {
		setRecvBuffer(fd, e.Cfg.SocketBuffer) // ud/udpio_linux.go
	}
	// Only the groups joined on this socket (not every group of the host).
	unix.SetsockoptInt(fd, unix.IPPROTO_IP, unix.IP_MULTICAST_ALL, 0)
	if err := unix.Bind(fd, &unix.SockaddrInet4{Port: int(group.Port()), Addr: group.Addr().As4()}); err != nil {
		return fail("bind", err)
	}
	idx, ifaddr, err := e.Cfg.Mcast.McastInterface(e.Cfg.Addr)
	if err != nil {
		return fail("interface for", err)
	}
	mreq := &unix.IPMreqn{Multiaddr: group.Addr().As4(), Address: ifaddr, Ifindex: int32(idx)}
	if err := unix.SetsockoptIPMreqn(fd, unix.IPPROTO_IP, unix.IP_ADD_MEMBERSHIP, mreq); err != nil {
		return fail("joining", err)
	}
	return fd, nil
}

// DetachMcast detaches q from group (engine goroutine).
func DetachMcast(c *rnic.QP, group netip.AddrPort) error {
	q, ok := c.Ops.(*QP)
	if !ok {
		return rnic.Errf(unix.EINVAL, "detach-mcast: QP %d is %v, not UD", c.Handle, c.Type)
	}
	e := q.e
	for i, m := range q.mcast.socks {
		if m.group == group {
			e.closeMcast(m)
			q.mcast.socks = slices.Delete(q.mcast.socks, i, i+1)
			return nil
		}
	}
	return rnic.Errf(unix.ENOENT, "detach-mcast: QP %d is not attached to %v", q.Handle, group)
}

// detachAllMcast detaches q from every group (the QP is being destroyed).
func (e *Engine) detachAllMcast(q *QP) {
	for _, m := range q.mcast.socks {
		e.closeMcast(m)
	}
	q.mcast.socks = nil
}

func (e *Engine) closeMcast(m *mcastSock) {
	if m.fd < 0 {
		return
	}
	unix.EpollCtl(e.EpFD, unix.EPOLL_CTL_DEL, m.fd, nil)
	delete(e.ByFD, int32(m.fd))
	unix.Close(m.fd) // leaves the group
	m.fd = -1
}
