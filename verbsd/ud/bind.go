package ud

import (
	"errors"
	"net/netip"

	"github.com/iwarpd/iwarpd/llp/dgram"
	"github.com/iwarpd/iwarpd/verbsd/rnic"
	"golang.org/x/sys/unix"
)

// BindUD opens a non-blocking UDP socket bound to the device address and
// port (0: the next free port of the UD range) for session owner.
func BindUD(srv *rnic.Device, port uint16, priv bool, owner uint64) (int, netip.AddrPort, error) {
	return BindDgram(srv, port, srv.Cfg.UDPorts, priv, owner)
}

// BindDgram opens a non-blocking UDP socket bound to the device address and
// port (0: the next free port of r; privileged ports only if priv, see
// rnic/bind.go) for session owner. A port reserved for a client-made
// socket (rnic/qpsock.go) is skipped, and refused when named unless
// owner reserved it.
func BindDgram(srv *rnic.Device, port uint16, r dgram.PortRange, priv bool, owner uint64) (int, netip.AddrPort, error) {
	if port != 0 && srv.PortReserved(port, owner) {
		return -1, netip.AddrPort{}, rnic.Errf(unix.EADDRINUSE, "create-qp: port %d is in use (reserved for another client's QP)", port)
	}
	addr := srv.Cfg.Addr
	family := unix.AF_INET
	if !addr.Is4() {
		family = unix.AF_INET6
	}
	fd, err := unix.Socket(family, unix.SOCK_DGRAM|unix.SOCK_NONBLOCK|unix.SOCK_CLOEXEC, unix.IPPROTO_UDP)
	if err != nil {
		return -1, netip.AddrPort{}, rnic.Errf(unix.ENOMEM, "create-qp: socket: %v", err)
	}
	if n := srv.Cfg.SocketBuffer; n > 0 {
		unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_SNDBUF, n)
		setRecvBuffer(fd, n) // ud/udpio_linux.go
	}
	try := func(p uint16) error {
		return unix.Bind(fd, rnic.AddrToSockaddr(netip.AddrPortFrom(addr, p)))
	}
	if port != 0 {
		if err := try(port); err != nil {
			unix.Close(fd)
			if errors.Is(err, unix.EADDRINUSE) {
				return -1, netip.AddrPort{}, rnic.Errf(unix.EADDRINUSE, "create-qp: port %d is in use", port)
			}
			return -1, netip.AddrPort{}, rnic.Errf(unix.EINVAL, "create-qp: bind %s:%d: %v", addr, port, err)
		}
		return fd, netip.AddrPortFrom(addr, port), nil
	}
	n := r.Len()
	start := int(srv.Port.Add(1))
	for i := range n {
		p := r.First + uint16((start+i)%n)
		if (rnic.Privileged(srv, p) && !priv) || srv.PortReserved(p, 0) {
			continue
		}
		err := try(p)
		if err == nil {
			return fd, netip.AddrPortFrom(addr, p), nil
		}
		if !errors.Is(err, unix.EADDRINUSE) {
			unix.Close(fd)
			return -1, netip.AddrPort{}, rnic.Errf(unix.EINVAL, "create-qp: bind %s:%d: %v", addr, p, err)
		}
	}
	unix.Close(fd)
	return -1, netip.AddrPort{}, rnic.Errf(unix.EADDRINUSE, "create-qp: every port of %d-%d is in use", r.First, r.Last)
}

// ReserveDgram finds the port a client-made socket of session s binds
// (reserve-port, rnic/qpsock.go): bind picks it as for a socket of the
// daemon's (BindUD, rd.BindRD), then the port is reserved for s and the
// daemon's socket closes, so that the client can bind it.
func ReserveDgram(s *rnic.Session, bind func() (int, netip.AddrPort, error)) (netip.AddrPort, error) {
	fd, ap, err := bind()
	if err != nil {
		return ap, err
	}
	s.Reserve(ap.Port()) // before the close: no other QP of the daemon's takes it
	unix.Close(fd)
	return ap, nil
}

// AdoptDgram gives a client-made QP socket, checked (rnic.CheckQPSocket),
// the buffers the daemon gives its own (-socket-buffer). The daemon never
// relies on its O_NONBLOCK (the client shares the file description): every
// call on it says MSG_DONTWAIT.
func AdoptDgram(srv *rnic.Device, fd int) {
	if n := srv.Cfg.SocketBuffer; n > 0 {
		unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_SNDBUF, n)
		setRecvBuffer(fd, n)
	}
}

// setRecvBuffer sets a datagram socket's receive buffer, the UD QP's
// receive backlog (ud/backlog.go), to n octets (the kernel doubles it for
// its bookkeeping): forced past net.core.rmem_max when the daemon may
// (CAP_NET_ADMIN: SO_RCVBUFFORCE), else capped there (SO_RCVBUF). The
// memory is only taken while datagrams wait in it.
func setRecvBuffer(fd, n int) {
	if unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_RCVBUFFORCE, n) != nil {
		unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_RCVBUF, n)
	}
}
