package ofverbs

import (
	"errors"
	"net/netip"
	"os"

	"github.com/iwarpd/iwarpd/proto"
	"golang.org/x/sys/unix"
)

// Client-made QP sockets (ABI 5; docs/design-small-messages.md "Security:
// a socket in the client's hands"). A UD or RD QP's UDP socket is made and
// bound by this process, then handed to the daemon with create-qp, so that
// the QP's datagrams carry this process's credentials (its uid for the
// firewall's owner match and policy routing, its cgroup), not the
// daemon's. The daemon reserves the port first (reserve-port) and checks
// the socket (rnic/qpsock.go). The process keeps no copy: ofverbs never
// reads or writes the socket itself.

// EnvQPSocket names the environment variable that chooses who makes the
// sockets of UD and RD QPs: "daemon" lets iwarpd make them, as before ABI
// 5 (their datagrams then leave as the daemon's user); anything else, or
// unset, the client (the default). The C client reads the same variable.
const EnvQPSocket = "IWARPD_QP_SOCKET"

// WithDaemonQPSockets lets the daemon make the sockets of this Context's
// UD and RD QPs, as IWARPD_QP_SOCKET=daemon does.
func WithDaemonQPSockets() Option { return func(o *options) { o.daemonSockets = true } }

// clientSockets decides, after hello, whether this Context makes its QP
// sockets: not when told otherwise, and only in the daemon's network
// namespace (a socket of another would be refused): the daemon's
// SO_NETNS_COOKIE (hello) must be this process's. A daemon whose kernel
// does not say (0) makes them itself.
func clientSockets(o options, hello proto.HelloReply) bool {
	if o.daemonSockets || os.Getenv(EnvQPSocket) == "daemon" || hello.NetnsCookie == 0 {
		return false
	}
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		if fd, err = unix.Socket(unix.AF_INET6, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0); err != nil {
			return false
		}
	}
	defer unix.Close(fd)
	v, err := unix.GetsockoptUint64(fd, unix.SOL_SOCKET, unix.SO_NETNS_COOKIE)
	return err == nil && v == hello.NetnsCookie
}

// qpSocket reserves a port for a UD or RD QP (port 0: the daemon's
// choice) and returns a UDP socket of this process bound to it; the
// caller passes it with create-qp (Socket, Port) and closes it after.
// A port another process took in between (the daemon holds none while
// reserved) is reserved again, a bounded number of times.
func (c *Context) qpSocket(typ proto.QPType, port uint16) (int, netip.AddrPort, error) {
	const op = "create-qp"
	var lastErr error
	for range 3 {
		var rep proto.ReservePortReply
		if err := c.call(proto.OpReservePort, proto.ReservePortRequest{Type: typ, Port: port}, &rep); err != nil {
			return -1, netip.AddrPort{}, err
		}
		ap, err := netip.ParseAddrPort(rep.Addr)
		if err != nil {
			return -1, netip.AddrPort{}, newError(op, unix.EPROTO, "the daemon reserved %q, not an address: %v", rep.Addr, err)
		}
		family := unix.AF_INET6
		if ap.Addr().Unmap().Is4() {
			family = unix.AF_INET
		}
		fd, err := unix.Socket(family, unix.SOCK_DGRAM|unix.SOCK_NONBLOCK|unix.SOCK_CLOEXEC, unix.IPPROTO_UDP)
		if err != nil {
			return -1, ap, newError(op, errnoOf(err, unix.EMFILE), "socket for the QP: %v", err)
		}
		err = unix.Bind(fd, sockaddrOf(ap))
		if err == nil {
			return fd, ap, nil
		}
		unix.Close(fd)
		lastErr = err
		if !errors.Is(err, unix.EADDRINUSE) || port != 0 {
			break
		}
	}
	return -1, netip.AddrPort{}, newError(op, errnoOf(lastErr, unix.EADDRINUSE),
		"binding the QP's socket to the port iwarpd reserved: %v (set %s=daemon to let iwarpd make it)", lastErr, EnvQPSocket)
}

// sockaddrOf is ap as a unix.Sockaddr.
func sockaddrOf(ap netip.AddrPort) unix.Sockaddr {
	if a := ap.Addr().Unmap(); a.Is4() {
		return &unix.SockaddrInet4{Port: int(ap.Port()), Addr: a.As4()}
	}
	return &unix.SockaddrInet6{Port: int(ap.Port()), Addr: ap.Addr().As16()}
}
