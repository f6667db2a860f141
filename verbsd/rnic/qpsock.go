package rnic

import (
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"sync"

	"github.com/iwarpd/iwarpd/proto"
	"golang.org/x/sys/unix"
)

// Client-made QP sockets (ABI 5; docs/design-small-messages.md "Security:
// a socket in the client's hands", docs/security.md "Client-made QP
// sockets"). A UD or RD QP's UDP socket may be made by the client, so
// that it keeps the client's credentials (the firewall's owner match,
// policy routing by uid, the client's cgroup): the daemon reserves the
// port (reserve-port), the client binds its socket to it and passes it
// with create-qp, and the daemon adopts it only after CheckQPSocket.
// Whatever the client does with its copy afterwards — connect it, clear
// O_NONBLOCK on the shared file description, shut it down, set options —
// it could do with a socket of its own on that port: the daemon calls it
// only with MSG_DONTWAIT and an error of it fails that QP alone
// (ud/sockerr.go).

// netnsCookie is SO_NETNS_COOKIE of the daemon's network namespace.
type netnsCookie struct {
	once sync.Once
	v    uint64
	ok   bool
}

// NetnsCookie returns SO_NETNS_COOKIE (socket(7), Linux 5.14) of the
// daemon's network namespace, read once from a socket of its own; ok is
// false when the kernel lacks it (the check is then skipped, with a note
// in the log).
func (d *Device) NetnsCookie() (uint64, bool) {
	c := &d.netns
	c.once.Do(func() {
		fd, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
		if err != nil {
			fd, err = unix.Socket(unix.AF_INET6, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
		}
		if err != nil {
			d.Log.Infof("client-made QP sockets: no socket to read the network namespace cookie (%v); their namespace is not checked", err)
			return
		}
		defer unix.Close(fd)
		v, err := unix.GetsockoptUint64(fd, unix.SOL_SOCKET, unix.SO_NETNS_COOKIE)
		if err != nil {
			d.Log.Infof("client-made QP sockets: this kernel has no SO_NETNS_COOKIE (Linux 5.14; %v): a client's socket is not checked to be in iwarpd's network namespace", err)
			return
		}
		c.v, c.ok = v, true
	})
	return c.v, c.ok
}

// CheckQPSocket accepts fd as the UDP socket of a datagram QP bound to
// want, or says what is wrong with it and what to do: UDP (SO_DOMAIN,
// SO_TYPE, SO_PROTOCOL) over the device's family, bound (getsockname) to
// want, not connected (getpeername fails with ENOTCONN), SO_REUSEADDR and
// SO_REUSEPORT off (a second socket on the port would take datagrams of
// the QP), and in the daemon's network namespace (SO_NETNS_COOKIE).
func (d *Device) CheckQPSocket(fd int, want netip.AddrPort) error {
	const what = "create-qp: the QP's socket (descriptor 1)"
	family, famName := unix.AF_INET6, "AF_INET6"
	if want.Addr().Unmap().Is4() {
		family, famName = unix.AF_INET, "AF_INET"
	}
	how := "make it with socket(" + famName + ", SOCK_DGRAM, IPPROTO_UDP) and bind it to " + want.String()
	dom, err := unix.GetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_DOMAIN)
	if errors.Is(err, unix.ENOTSOCK) {
		return Errf(unix.ENOTSOCK, "%s is not a socket; %s", what, how)
	}
	if err != nil {
		return Errf(unix.EINVAL, "%s: SO_DOMAIN: %v; %s", what, err, how)
	}
	if dom != family {
		return Errf(unix.EAFNOSUPPORT, "%s is of address family %d, not the device's %s (iwarpd serves %s); %s", what, dom, famName, want.Addr(), how)
	}
	if typ, err := unix.GetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_TYPE); err != nil || typ != unix.SOCK_DGRAM {
		return Errf(unix.EPROTOTYPE, "%s is not a datagram socket (SO_TYPE %d, %v); %s", what, typ, err, how)
	}
	if p, err := unix.GetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_PROTOCOL); err != nil || p != unix.IPPROTO_UDP {
		return Errf(unix.EPROTONOSUPPORT, "%s is not UDP (SO_PROTOCOL %d, %v); %s", what, p, err, how)
	}
	sa, err := unix.Getsockname(fd)
	if err != nil {
		return Errf(unix.EINVAL, "%s: getsockname: %v; %s", what, err, how)
	}
	if got := SockaddrToAddrPort(sa); got != netip.AddrPortFrom(want.Addr().Unmap(), want.Port()) {
		return Errf(unix.EADDRNOTAVAIL, "%s is bound to %v, not to the device address and the port reserved for it, %s; bind it to %s",
			what, got, want, want)
	}
	if peer, err := unix.Getpeername(fd); err == nil {
		return Errf(unix.EISCONN, "%s is connected to %v: a QP's socket sends to and receives from any peer; pass an unconnected socket",
			what, SockaddrToAddrPort(peer))
	} else if !errors.Is(err, unix.ENOTCONN) {
		return Errf(unix.EINVAL, "%s: getpeername: %v; %s", what, err, how)
	}
	for _, o := range []struct {
		opt  int
		name string
	}{{unix.SO_REUSEADDR, "SO_REUSEADDR"}, {unix.SO_REUSEPORT, "SO_REUSEPORT"}} {
		if v, err := unix.GetsockoptInt(fd, unix.SOL_SOCKET, o.opt); err != nil || v != 0 {
			return Errf(unix.EINVAL, "%s has %s set (%d, %v): another socket could then share the QP's port and take its datagrams; leave %s off",
				what, o.name, v, err, o.name)
		}
	}
	if mine, ok := d.NetnsCookie(); ok {
		got, err := unix.GetsockoptUint64(fd, unix.SOL_SOCKET, unix.SO_NETNS_COOKIE)
		if err != nil || got != mine {
			return Errf(unix.EXDEV, "%s belongs to another network namespace than iwarpd's (SO_NETNS_COOKIE %d, iwarpd's %d; %v): "+
				"make it in iwarpd's namespace, or let iwarpd make it (IWARPD_QP_SOCKET=daemon, docs/c-client.md)", what, got, mine, err)
		}
	}
	return nil
}

// SockaddrToAddrPort converts an IPv4 or IPv6 socket address (the zero
// AddrPort for another kind).
func SockaddrToAddrPort(sa unix.Sockaddr) netip.AddrPort {
	switch a := sa.(type) {
	case *unix.SockaddrInet4:
		return netip.AddrPortFrom(netip.AddrFrom4(a.Addr), uint16(a.Port))
	case *unix.SockaddrInet6:
		return netip.AddrPortFrom(netip.AddrFrom16(a.Addr).Unmap(), uint16(a.Port))
	}
	return netip.AddrPort{}
}

// Port reservations (reserve-port): port → the session it is kept for.
type reservations struct {
	mu    sync.Mutex
	ports map[uint16]uint64
}

// PortReserved reports whether port is reserved for a session other than
// owner (0: for any session).
func (d *Device) PortReserved(port uint16, owner uint64) bool {
	r := &d.reserved
	r.mu.Lock()
	defer r.mu.Unlock()
	id, ok := r.ports[port]
	return ok && id != owner
}

// Reserve keeps port for s (reserve-port) until TakeReservation, the end
// of s (DropReservations), or MaxReservations newer ones of s.
func (s *Session) Reserve(port uint16) {
	r := &s.Dev.reserved
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.ports == nil {
		r.ports = map[uint16]uint64{}
	}
	s.reserved = slices.DeleteFunc(s.reserved, func(p uint16) bool { return p == port })
	if len(s.reserved) >= proto.MaxReservations {
		delete(r.ports, s.reserved[0])
		s.reserved = s.reserved[1:]
	}
	s.reserved = append(s.reserved, port)
	r.ports[port] = s.ID
}

// TakeReservation ends s's reservation of port and reports whether it
// had one.
func (s *Session) TakeReservation(port uint16) bool {
	r := &s.Dev.reserved
	r.mu.Lock()
	defer r.mu.Unlock()
	i := slices.Index(s.reserved, port)
	if i < 0 {
		return false
	}
	s.reserved = slices.Delete(s.reserved, i, i+1)
	delete(r.ports, port)
	return true
}

// DropReservations ends every reservation of s (the session ends).
func (s *Session) DropReservations() {
	r := &s.Dev.reserved
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, p := range s.reserved {
		delete(r.ports, p)
	}
	s.reserved = nil
}

// SocketFailed moves q to ERROR for an error of its client-made socket
// itself (the client shut it down, connected it, set IP_RECVERR...: what
// could break a socket of its own on that port), never failing the
// engine: the socket leaves the epoll set, so that a level-triggered
// error or hang-up does not wake every pass, and the QP stays in ERROR
// (its work flushed) until the client destroys it.
func (e *Engine) SocketFailed(q *QP, what string, err error) {
	if !q.SockDead {
		q.SockDead = true
		q.Readable = false
		unix.EpollCtl(e.EpFD, unix.EPOLL_CTL_DEL, q.FD, nil)
	}
	e.ErrorQP(q, fmt.Sprintf("its socket (the client's own) failed: %s: %v; destroy the QP and create another "+
		"(the client must not shut down, connect or reconfigure a QP's socket)", what, err))
}

// ClientSockBroken reports whether err, of a send or receive on q's
// socket, is an error of a client-made socket itself (shut down,
// connected, an ICMP error reported on it) rather than of one datagram or
// destination; a socket iwarpd made never reports these.
func ClientSockBroken(q *QP, err error) bool {
	return q.ClientSock && SockBroken(err)
}

// SockBroken reports whether err is one a socket reports only when it is
// shut down, connected or told to report ICMP errors (ClientSockBroken).
func SockBroken(err error) bool {
	if err == nil {
		return false
	}
	for _, e := range []unix.Errno{unix.EPIPE, unix.ENOTCONN, unix.EDESTADDRREQ, unix.ECONNREFUSED, unix.ECONNRESET,
		unix.ESHUTDOWN, unix.EBADF, unix.ENOTSOCK, unix.EISCONN} {
		if errors.Is(err, e) {
			return true
		}
	}
	return false
}

// SockEventBroken reports whether epoll events of q's socket say a
// client-made socket failed (EPOLLERR, EPOLLHUP, EPOLLRDHUP: shut down
// or an error queued) and returns the error to report.
func SockEventBroken(q *QP, events uint32) (error, bool) {
	if !q.ClientSock || events&(unix.EPOLLERR|unix.EPOLLHUP|unix.EPOLLRDHUP) == 0 {
		return nil, false
	}
	if v, err := unix.GetsockoptInt(q.FD, unix.SOL_SOCKET, unix.SO_ERROR); err == nil && v != 0 {
		return unix.Errno(v), true
	}
	if events&(unix.EPOLLHUP|unix.EPOLLRDHUP) != 0 {
		return unix.ESHUTDOWN, true
	}
	return unix.EIO, true
}

// SockInterest is the epoll interest of a QP's socket that wants to read:
// EPOLLIN, and EPOLLRDHUP for a client-made one (shut down by the client:
// it would otherwise stay readable forever, rnic/qpsock.go).
func SockInterest(q *QP) uint32 {
	if q.ClientSock {
		return unix.EPOLLIN | unix.EPOLLRDHUP
	}
	return unix.EPOLLIN
}
