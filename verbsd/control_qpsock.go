package verbsd

import (
	"net/netip"

	"github.com/iwarpd/iwarpd/proto"
	"github.com/iwarpd/iwarpd/verbsd/rd"
	"github.com/iwarpd/iwarpd/verbsd/rnic"
	"github.com/iwarpd/iwarpd/verbsd/ud"
	"golang.org/x/sys/unix"
)

// Client-made QP sockets (ABI 5; rnic/qpsock.go, docs/security.md
// "Client-made QP sockets"): reserve-port, then create-qp with the socket.

func init() {
	handlers[proto.OpReservePort] = (*session).reservePortOp
}

// reservePortOp reserves the port of a UD or RD QP whose socket the client
// makes itself: the checks of create-qp for the type and the port, then
// the port the daemon would have bound (ud.ReserveDgram).
func (s *session) reservePortOp(body []byte, _ []int) (any, error) {
	var req proto.ReservePortRequest
	if err := decode(body, &req); err != nil {
		return nil, err
	}
	cfg := s.Dev.Cfg
	var bind func() (int, netip.AddrPort, error)
	switch req.Type {
	case proto.QPTypeUD:
		if req.Port != 0 && cfg.RDPorts.Len() > 0 && cfg.RDPorts.Contains(req.Port) {
			return nil, rnic.Errf(unix.EINVAL, "reserve-port: port %d is in the RD range %d-%d (-rd-ports), kept for RD QPs; name another port or 0", req.Port, cfg.RDPorts.First, cfg.RDPorts.Last)
		}
		bind = func() (int, netip.AddrPort, error) { return ud.BindUD(s.Dev, req.Port, s.PrivBind, s.ID) }
	case proto.QPTypeRD:
		if cfg.RDPorts.Len() == 0 || cfg.RDPorts.First == 0 {
			return nil, rnic.Errf(unix.EOPNOTSUPP, "reserve-port: RD queue pairs are disabled (empty RD port range)")
		}
		if req.Port != 0 && cfg.UDPorts.Contains(req.Port) {
			return nil, rnic.Errf(unix.EINVAL, "reserve-port: port %d is in the UD range %d-%d (-ud-ports), kept for UD QPs; name another port or 0", req.Port, cfg.UDPorts.First, cfg.UDPorts.Last)
		}
		bind = func() (int, netip.AddrPort, error) { return rd.BindRD(s.Session, req.Port) } // rd/linger.go: a lingering port is taken over
	default:
		return nil, rnic.Errf(unix.EINVAL, "reserve-port: QP type %d has no port of its own (UD and RD only; an RC QP's socket is its connection's)", req.Type)
	}
	if err := s.CheckClientPort("reserve-port", req.Port); err != nil { // rnic/bind.go
		return nil, err
	}
	ap, err := ud.ReserveDgram(s.Session, bind)
	if err != nil {
		return nil, err
	}
	return proto.ReservePortReply{Addr: ap.String()}, nil
}

// adoptSocket makes descriptor 1 of create-qp core's socket: port must be
// reserved for this session (reserve-port) and the socket pass
// rnic.CheckQPSocket. On success the descriptor is core's.
func (s *session) adoptSocket(core *rnic.QP, port uint16, fds []int) error {
	if len(fds) < 2 || fds[1] < 0 {
		return rnic.Errf(unix.EINVAL, "create-qp: socket is set but the request carries no descriptor 1 (the QP's UDP socket)")
	}
	if port == 0 || !s.TakeReservation(port) {
		return rnic.Errf(unix.EINVAL, "create-qp: port %d is not reserved for this session: reserve it first (reserve-port) and bind the socket to the address it returns", port)
	}
	want := netip.AddrPortFrom(s.Dev.Cfg.Addr, port)
	if err := s.Dev.CheckQPSocket(fds[1], want); err != nil {
		return err
	}
	fd, err := takeFD(fds, 1, "create-qp")
	if err != nil {
		return err
	}
	ud.AdoptDgram(s.Dev, fd)
	core.FD, core.Local, core.ClientSock = fd, want, true
	return nil
}
