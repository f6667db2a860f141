package ud

import (
	"errors"
	"net/netip"

	"github.com/iwarpd/iwarpd/llp/dgram"
	"github.com/iwarpd/iwarpd/verbsd/rnic"
	"golang.org/x/sys/unix"
)

// BindUD opens a non-blocking UDP socket bound to the device address and
// port (0: the next free port of the UD range).
func BindUD(srv *rnic.Device, port uint16, priv bool) (int, netip.AddrPort, error) {
	return BindDgram(srv, port, srv.Cfg.UDPorts, priv)
}

// BindDgram opens a non-blocking UDP socket bound to the device address and
// port (0: the next free port of r; privileged ports only if priv, see
// rnic/bind.go).
func BindDgram(srv *rnic.Device, port uint16, r dgram.PortRange, priv bool) (int, netip.AddrPort, error) {
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
		if rnic.Privileged(srv, p) && !priv {
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
