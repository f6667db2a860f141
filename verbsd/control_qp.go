package verbsd

import (
	"errors"
	"net/netip"

	"github.com/iwarpd/iwarpd/internal/shm"
	"github.com/iwarpd/iwarpd/llp/dgram"
	"github.com/iwarpd/iwarpd/proto"
	"github.com/iwarpd/iwarpd/verbsd/rnic"
	"golang.org/x/sys/unix"
)

func (s *session) createQP(body []byte, fds []int) (any, error) {
	var req proto.CreateQPRequest
	if err := decode(body, &req); err != nil {
		return nil, err
	}
	switch req.Type {
	case proto.QPTypeUD:
	case proto.QPTypeRC:
		// merge_send_imm is RC's only (rc_imm.go): a datagram Send with
		// Immediate is one message already.
		// Connected with Connect/Accept (cm*.go): no socket until then.
		if req.Port != 0 || req.NoCRC || req.QKey != 0 {
			return nil, rnic.Errf(unix.EINVAL, "create-qp: port, no_crc and qkey are datagram options; RC QPs negotiate with MPA")
		}
	case proto.QPTypeRD:
		if s.Dev.Cfg.RDPorts.Len() == 0 || s.Dev.Cfg.RDPorts.First == 0 {
			return nil, rnic.Errf(unix.EOPNOTSUPP, "create-qp: RD queue pairs are disabled (empty RD port range)")
		}
		if req.Port != 0 && !s.Dev.Cfg.RDPorts.Contains(req.Port) {
			return nil, rnic.Errf(unix.EINVAL, "create-qp: port %d is outside the RD range %d-%d", req.Port, s.Dev.Cfg.RDPorts.First, s.Dev.Cfg.RDPorts.Last)
		}
	default:
		return nil, rnic.Errf(unix.EINVAL, "create-qp: unknown QP type %d", req.Type)
	}
	if req.MergeSendImm && req.Type != proto.QPTypeRC {
		return nil, rnic.Errf(unix.EINVAL, "create-qp: merge_send_imm is an RC option; a UD or RD Send with Immediate takes one receive already")
	}
	if err := s.checkClientPort("create-qp", req.Port); err != nil {
		return nil, err
	}
	lim := s.Dev.Cfg.Limits
	c := req.Caps
	if !proto.ValidDepth(c.MaxSendWR) || int(c.MaxSendWR) > lim.MaxQPWR {
		return nil, rnic.Errf(unix.EINVAL, "create-qp: max_send_wr %d: want a power of two up to %d", c.MaxSendWR, lim.MaxQPWR)
	}
	if req.SRQ != 0 && c.MaxRecvWR != 0 {
		return nil, rnic.Errf(unix.EINVAL, "create-qp: max_recv_wr must be 0 with an SRQ")
	}
	if req.SRQ == 0 && (!proto.ValidDepth(c.MaxRecvWR) || int(c.MaxRecvWR) > lim.MaxQPWR) {
		return nil, rnic.Errf(unix.EINVAL, "create-qp: max_recv_wr %d: want a power of two up to %d", c.MaxRecvWR, lim.MaxQPWR)
	}
	if int(c.MaxSendSGE) > lim.MaxSGE || int(c.MaxRecvSGE) > lim.MaxSGE {
		return nil, rnic.Errf(unix.EINVAL, "create-qp: %d send / %d receive SGEs: the device allows %d", c.MaxSendSGE, c.MaxRecvSGE, lim.MaxSGE)
	}
	if int(c.MaxInline) > lim.MaxInline {
		return nil, rnic.Errf(unix.EINVAL, "create-qp: max_inline %d: the device allows %d", c.MaxInline, lim.MaxInline)
	}
	if c.MaxRdAtomic > rdMaxDepth || c.MaxDestRdAtomic > rdMaxDepth {
		return nil, rnic.Errf(unix.EINVAL, "create-qp: max_rd_atomic %d / max_dest_rd_atomic %d: at most %d", c.MaxRdAtomic, c.MaxDestRdAtomic, rdMaxDepth)
	}
	if req.Type == proto.QPTypeUD && req.Port != 0 && !s.Dev.Cfg.UDPorts.Contains(req.Port) {
		return nil, rnic.Errf(unix.EINVAL, "create-qp: port %d is outside the UD range %d-%d", req.Port, s.Dev.Cfg.UDPorts.First, s.Dev.Cfg.UDPorts.Last)
	}
	sqStride := proto.SQEStride(c.MaxSendSGE, c.MaxInline)
	rqStride := proto.RQEStride(c.MaxRecvSGE)
	sqBytes := proto.RingBytes(c.MaxSendWR, sqStride)
	size := sqBytes
	if req.SRQ == 0 {
		size += proto.RingBytes(c.MaxRecvWR, rqStride)
	}
	held, err := s.HoldQP(req.Type) // userlimits.go
	if err != nil {
		return nil, err
	}
	created := false
	defer func() {
		if !created {
			held.Release()
		}
	}()
	fd, err := takeFD(fds, 0, "create-qp")
	if err != nil {
		return nil, err
	}
	m, err := rnic.MapRegion(fd, 0, uint64(size))
	if err != nil {
		return nil, err
	}
	q := newQP(&rnic.QP{S: s.Session, Caps: c, SigAll: req.SigAll, State: proto.QPStateReset, Region: m, FD: -1,
		MaxRecvS: c.MaxRecvSGE, Typ: req.Type}) // transport.go
	q.noCRC, q.mergeImm = req.NoCRC, req.MergeSendImm
	if req.Type != proto.QPTypeRC {
		q.qkey = req.QKey
		if q.qkey == 0 {
			q.qkey = rnic.RandomU32() // keys.go; the client learns it from the reply
		}
	}
	fail := func(err error) (any, error) {
		rnic.CloseQP(q.QP)
		return nil, err
	}
	sqRing, err := shm.NewRing(m.Mem[:sqBytes], proto.RingSQ, c.MaxSendWR, sqStride, false)
	if err != nil {
		return fail(rnic.Errf(unix.EINVAL, "create-qp: send queue: %v", err))
	}
	q.Sq = shm.NewConsumer(sqRing)
	if req.SRQ == 0 {
		rqRing, err := shm.NewRing(m.Mem[sqBytes:], proto.RingRQ, c.MaxRecvWR, rqStride, false)
		if err != nil {
			return fail(rnic.Errf(unix.EINVAL, "create-qp: receive queue: %v", err))
		}
		q.Rq = shm.NewConsumer(rqRing)
	}
	if req.Type == proto.QPTypeUD {
		if q.FD, q.Local, err = bindUD(s.Dev, req.Port, s.PrivBind); err != nil {
			return fail(err)
		}
	}
	if req.Type == proto.QPTypeRD { // rd_qp.go
		if q.FD, q.Local, err = s.bindRD(req.Port); err != nil { // rd_linger.go
			return fail(err)
		}
		q.rd = newRDQP(rdQPConfig(&s.Dev.Cfg.RD, c), s.Dev.Cfg.DatagramSize, s.Dev.Cfg.SocketBuffer, nil) // the store of its engine, set when placed
	}
	var reply proto.CreateQPReply
	err = s.Eng.Do(func() error {
		p := s.PDs[req.PD]
		if p == nil {
			return rnic.Errf(unix.EINVAL, "create-qp: no protection domain %d", req.PD)
		}
		scq, rcq := s.CQs[req.SendCQ], s.CQs[req.RecvCQ]
		if scq == nil || rcq == nil {
			return rnic.Errf(unix.EINVAL, "create-qp: no CQ %d / %d", req.SendCQ, req.RecvCQ)
		}
		var x *rnic.SRQ
		if req.SRQ != 0 {
			if x = s.SRQs[req.SRQ]; x == nil {
				return rnic.Errf(unix.EINVAL, "create-qp: no SRQ %d", req.SRQ)
			}
			q.MaxRecvS = x.MaxSGE
		}
		if len(s.QPs) >= lim.MaxQP {
			return rnic.Errf(unix.ENOMEM, "create-qp: session limit of %d QPs reached", lim.MaxQP)
		}
		h, err := s.NextHandleID()
		if err != nil {
			return err
		}
		q.Handle, q.PD, q.SendCQ, q.RecvCQ, q.SRQ = h, p, scq, rcq, x
		q.Eng = s.Dev.Place() // engines.go
		q.e = engOf(q.Eng)
		if q.rd != nil {
			q.rd.store = &q.e.rdStoreBytes
		}
		if q.Typ == proto.QPTypeRC {
			if err := q.e.addRCQP(q); err != nil {
				return err
			}
		} else if err := q.e.AddQP(q.QP); err != nil {
			return err
		}
		p.Refs++
		scq.Refs++
		rcq.Refs++
		if x != nil {
			x.Refs++
		}
		s.QPs[h] = q.QP
		reply = proto.CreateQPReply{Handle: h, QPN: q.QPN, Addr: qpAddr(q), QKey: q.qkey}
		return nil
	})
	if err != nil {
		return fail(err)
	}
	created = true
	return &reply, nil
}

// bindUD opens a non-blocking UDP socket bound to the device address and
// port (0: the next free port of the UD range).
func bindUD(srv *rnic.Device, port uint16, priv bool) (int, netip.AddrPort, error) {
	return bindDgram(srv, port, srv.Cfg.UDPorts, priv)
}

// bindDgram opens a non-blocking UDP socket bound to the device address and
// port (0: the next free port of r; privileged ports only if priv, see
// bind.go).
func bindDgram(srv *rnic.Device, port uint16, r dgram.PortRange, priv bool) (int, netip.AddrPort, error) {
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
		setRecvBuffer(fd, n) // udpio_linux.go
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
		if privileged(srv, p) && !priv {
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

func (s *session) modifyQP(body []byte, _ []int) (any, error) {
	var req proto.ModifyQPRequest
	if err := decode(body, &req); err != nil {
		return nil, err
	}
	return nil, s.Eng.Do(func() error {
		q := s.qp(req.QP)
		if q == nil {
			return rnic.Errf(unix.EINVAL, "modify-qp: no QP %d", req.QP)
		}
		from, to := q.State, req.State
		if q.Typ == proto.QPTypeRC && (to == proto.QPStateRTR || to == proto.QPStateRTS) {
			return rnic.Errf(unix.EINVAL, "modify-qp: RC QPs are connected with rdma-cm style Connect/Accept, not moved to %v", to)
		}
		ok := false
		switch to {
		case proto.QPStateReset, proto.QPStateError:
			ok = true
		case proto.QPStateInit:
			ok = from == proto.QPStateReset || from == proto.QPStateInit
		case proto.QPStateRTR:
			ok = from == proto.QPStateInit
		case proto.QPStateRTS:
			ok = from == proto.QPStateRTR || from == proto.QPStateRTS
		}
		if !ok {
			return rnic.Errf(unix.EINVAL, "modify-qp: %v → %v is not a valid transition", from, to)
		}
		if req.QKey != 0 {
			if q.Typ == proto.QPTypeRC {
				return rnic.Errf(unix.EINVAL, "modify-qp: a Q_Key is a datagram QP attribute; RC QPs have none")
			}
			q.qkey = req.QKey
		}
		if to == proto.QPStateReset {
			rnic.DiscardPosted(q.Sq)
			rnic.DiscardPosted(q.Rq)
			q.sendSeg, q.Blocked = 0, false
			q.reasm.reset()
			q.wrec.reset()
			q.rdReset() // rd_qp.go: a new life
		}
		if to == proto.QPStateError && from != to {
			q.ErrWhy = "the client moved it to ERROR (modify-qp)"
		}
		q.State = to
		return nil
	})
}

func (s *session) queryQP(body []byte, _ []int) (any, error) {
	var req proto.Handle
	if err := decode(body, &req); err != nil {
		return nil, err
	}
	var reply proto.QueryQPReply
	return &reply, s.Eng.Do(func() error {
		q := s.qp(req.Handle)
		if q == nil {
			return rnic.Errf(unix.EINVAL, "query-qp: no QP %d", req.Handle)
		}
		reply = proto.QueryQPReply{Type: q.Typ, State: q.State, QPN: q.QPN, Addr: qpAddr(q), Caps: q.Caps, QKey: q.qkey}
		return nil
	})
}

func (s *session) destroyQP(body []byte, _ []int) (any, error) {
	var req proto.Handle
	if err := decode(body, &req); err != nil {
		return nil, err
	}
	return nil, s.Eng.Do(func() error {
		q := s.qp(req.Handle)
		if q == nil {
			return rnic.Errf(unix.EINVAL, "destroy-qp: no QP %d", req.Handle)
		}
		delete(s.QPs, req.Handle)
		q.e.RemoveQP(q.QP)
		rnic.CloseQP(q.QP)
		s.QPHeld(q.Typ).Release() // userlimits.go
		q.PD.Refs--
		q.SendCQ.Refs--
		q.RecvCQ.Refs--
		if q.SRQ != nil {
			q.SRQ.Refs--
		}
		return nil
	})
}
