package verbsd

import (
	"errors"
	"net/netip"

	"github.com/iwarpd/iwarpd/internal/shm"
	"github.com/iwarpd/iwarpd/llp/dgram"
	"github.com/iwarpd/iwarpd/proto"
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
			return nil, errf(unix.EINVAL, "create-qp: port, no_crc and qkey are datagram options; RC QPs negotiate with MPA")
		}
	case proto.QPTypeRD:
		if s.dev.cfg.RDPorts.Len() == 0 || s.dev.cfg.RDPorts.First == 0 {
			return nil, errf(unix.EOPNOTSUPP, "create-qp: RD queue pairs are disabled (empty RD port range)")
		}
		if req.Port != 0 && !s.dev.cfg.RDPorts.Contains(req.Port) {
			return nil, errf(unix.EINVAL, "create-qp: port %d is outside the RD range %d-%d", req.Port, s.dev.cfg.RDPorts.First, s.dev.cfg.RDPorts.Last)
		}
	default:
		return nil, errf(unix.EINVAL, "create-qp: unknown QP type %d", req.Type)
	}
	if req.MergeSendImm && req.Type != proto.QPTypeRC {
		return nil, errf(unix.EINVAL, "create-qp: merge_send_imm is an RC option; a UD or RD Send with Immediate takes one receive already")
	}
	if err := s.checkClientPort("create-qp", req.Port); err != nil {
		return nil, err
	}
	lim := s.dev.cfg.Limits
	c := req.Caps
	if !proto.ValidDepth(c.MaxSendWR) || int(c.MaxSendWR) > lim.MaxQPWR {
		return nil, errf(unix.EINVAL, "create-qp: max_send_wr %d: want a power of two up to %d", c.MaxSendWR, lim.MaxQPWR)
	}
	if req.SRQ != 0 && c.MaxRecvWR != 0 {
		return nil, errf(unix.EINVAL, "create-qp: max_recv_wr must be 0 with an SRQ")
	}
	if req.SRQ == 0 && (!proto.ValidDepth(c.MaxRecvWR) || int(c.MaxRecvWR) > lim.MaxQPWR) {
		return nil, errf(unix.EINVAL, "create-qp: max_recv_wr %d: want a power of two up to %d", c.MaxRecvWR, lim.MaxQPWR)
	}
	if int(c.MaxSendSGE) > lim.MaxSGE || int(c.MaxRecvSGE) > lim.MaxSGE {
		return nil, errf(unix.EINVAL, "create-qp: %d send / %d receive SGEs: the device allows %d", c.MaxSendSGE, c.MaxRecvSGE, lim.MaxSGE)
	}
	if int(c.MaxInline) > lim.MaxInline {
		return nil, errf(unix.EINVAL, "create-qp: max_inline %d: the device allows %d", c.MaxInline, lim.MaxInline)
	}
	if c.MaxRdAtomic > rdMaxDepth || c.MaxDestRdAtomic > rdMaxDepth {
		return nil, errf(unix.EINVAL, "create-qp: max_rd_atomic %d / max_dest_rd_atomic %d: at most %d", c.MaxRdAtomic, c.MaxDestRdAtomic, rdMaxDepth)
	}
	if req.Type == proto.QPTypeUD && req.Port != 0 && !s.dev.cfg.UDPorts.Contains(req.Port) {
		return nil, errf(unix.EINVAL, "create-qp: port %d is outside the UD range %d-%d", req.Port, s.dev.cfg.UDPorts.First, s.dev.cfg.UDPorts.Last)
	}
	sqStride := proto.SQEStride(c.MaxSendSGE, c.MaxInline)
	rqStride := proto.RQEStride(c.MaxRecvSGE)
	sqBytes := proto.RingBytes(c.MaxSendWR, sqStride)
	size := sqBytes
	if req.SRQ == 0 {
		size += proto.RingBytes(c.MaxRecvWR, rqStride)
	}
	held, err := s.holdQP(req.Type) // userlimits.go
	if err != nil {
		return nil, err
	}
	created := false
	defer func() {
		if !created {
			held.release()
		}
	}()
	fd, err := takeFD(fds, 0, "create-qp")
	if err != nil {
		return nil, err
	}
	m, err := mapRegion(fd, 0, uint64(size))
	if err != nil {
		return nil, err
	}
	q := newQP(&QP{s: s.Session, caps: c, sigAll: req.SigAll, state: proto.QPStateReset, region: m, fd: -1,
		maxRecvS: c.MaxRecvSGE, typ: req.Type}) // transport.go
	q.noCRC, q.mergeImm = req.NoCRC, req.MergeSendImm
	if req.Type != proto.QPTypeRC {
		q.qkey = req.QKey
		if q.qkey == 0 {
			q.qkey = randomU32() // keys.go; the client learns it from the reply
		}
	}
	fail := func(err error) (any, error) {
		closeQP(q.QP)
		return nil, err
	}
	sqRing, err := shm.NewRing(m.mem[:sqBytes], proto.RingSQ, c.MaxSendWR, sqStride, false)
	if err != nil {
		return fail(errf(unix.EINVAL, "create-qp: send queue: %v", err))
	}
	q.sq = shm.NewConsumer(sqRing)
	if req.SRQ == 0 {
		rqRing, err := shm.NewRing(m.mem[sqBytes:], proto.RingRQ, c.MaxRecvWR, rqStride, false)
		if err != nil {
			return fail(errf(unix.EINVAL, "create-qp: receive queue: %v", err))
		}
		q.rq = shm.NewConsumer(rqRing)
	}
	if req.Type == proto.QPTypeUD {
		if q.fd, q.local, err = bindUD(s.dev, req.Port, s.privBind); err != nil {
			return fail(err)
		}
	}
	if req.Type == proto.QPTypeRD { // rd_qp.go
		if q.fd, q.local, err = s.bindRD(req.Port); err != nil { // rd_linger.go
			return fail(err)
		}
		q.rd = newRDQP(rdQPConfig(&s.dev.cfg.RD, c), s.dev.cfg.DatagramSize, s.dev.cfg.SocketBuffer, nil) // the store of its engine, set when placed
	}
	var reply proto.CreateQPReply
	err = s.eng.Do(func() error {
		p := s.pds[req.PD]
		if p == nil {
			return errf(unix.EINVAL, "create-qp: no protection domain %d", req.PD)
		}
		scq, rcq := s.cqs[req.SendCQ], s.cqs[req.RecvCQ]
		if scq == nil || rcq == nil {
			return errf(unix.EINVAL, "create-qp: no CQ %d / %d", req.SendCQ, req.RecvCQ)
		}
		var x *srq
		if req.SRQ != 0 {
			if x = s.srqs[req.SRQ]; x == nil {
				return errf(unix.EINVAL, "create-qp: no SRQ %d", req.SRQ)
			}
			q.maxRecvS = x.maxSGE
		}
		if len(s.qps) >= lim.MaxQP {
			return errf(unix.ENOMEM, "create-qp: session limit of %d QPs reached", lim.MaxQP)
		}
		h, err := s.nextHandleID()
		if err != nil {
			return err
		}
		q.handle, q.pd, q.sendCQ, q.recvCQ, q.srq = h, p, scq, rcq, x
		q.eng = s.dev.place() // engines.go
		q.e = engOf(q.eng)
		if q.rd != nil {
			q.rd.store = &q.e.rdStoreBytes
		}
		if q.typ == proto.QPTypeRC {
			if err := q.e.addRCQP(q); err != nil {
				return err
			}
		} else if err := q.e.addQP(q.QP); err != nil {
			return err
		}
		p.refs++
		scq.refs++
		rcq.refs++
		if x != nil {
			x.refs++
		}
		s.qps[h] = q.QP
		reply = proto.CreateQPReply{Handle: h, QPN: q.qpn, Addr: qpAddr(q), QKey: q.qkey}
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
func bindUD(srv *device, port uint16, priv bool) (int, netip.AddrPort, error) {
	return bindDgram(srv, port, srv.cfg.UDPorts, priv)
}

// bindDgram opens a non-blocking UDP socket bound to the device address and
// port (0: the next free port of r; privileged ports only if priv, see
// bind.go).
func bindDgram(srv *device, port uint16, r dgram.PortRange, priv bool) (int, netip.AddrPort, error) {
	addr := srv.cfg.Addr
	family := unix.AF_INET
	if !addr.Is4() {
		family = unix.AF_INET6
	}
	fd, err := unix.Socket(family, unix.SOCK_DGRAM|unix.SOCK_NONBLOCK|unix.SOCK_CLOEXEC, unix.IPPROTO_UDP)
	if err != nil {
		return -1, netip.AddrPort{}, errf(unix.ENOMEM, "create-qp: socket: %v", err)
	}
	if n := srv.cfg.SocketBuffer; n > 0 {
		unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_SNDBUF, n)
		setRecvBuffer(fd, n) // udpio_linux.go
	}
	try := func(p uint16) error {
		return unix.Bind(fd, addrToSockaddr(netip.AddrPortFrom(addr, p)))
	}
	if port != 0 {
		if err := try(port); err != nil {
			unix.Close(fd)
			if errors.Is(err, unix.EADDRINUSE) {
				return -1, netip.AddrPort{}, errf(unix.EADDRINUSE, "create-qp: port %d is in use", port)
			}
			return -1, netip.AddrPort{}, errf(unix.EINVAL, "create-qp: bind %s:%d: %v", addr, port, err)
		}
		return fd, netip.AddrPortFrom(addr, port), nil
	}
	n := r.Len()
	start := int(srv.port.Add(1))
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
			return -1, netip.AddrPort{}, errf(unix.EINVAL, "create-qp: bind %s:%d: %v", addr, p, err)
		}
	}
	unix.Close(fd)
	return -1, netip.AddrPort{}, errf(unix.EADDRINUSE, "create-qp: every port of %d-%d is in use", r.First, r.Last)
}

func (s *session) modifyQP(body []byte, _ []int) (any, error) {
	var req proto.ModifyQPRequest
	if err := decode(body, &req); err != nil {
		return nil, err
	}
	return nil, s.eng.Do(func() error {
		q := s.qp(req.QP)
		if q == nil {
			return errf(unix.EINVAL, "modify-qp: no QP %d", req.QP)
		}
		from, to := q.state, req.State
		if q.typ == proto.QPTypeRC && (to == proto.QPStateRTR || to == proto.QPStateRTS) {
			return errf(unix.EINVAL, "modify-qp: RC QPs are connected with rdma-cm style Connect/Accept, not moved to %v", to)
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
			return errf(unix.EINVAL, "modify-qp: %v → %v is not a valid transition", from, to)
		}
		if req.QKey != 0 {
			if q.typ == proto.QPTypeRC {
				return errf(unix.EINVAL, "modify-qp: a Q_Key is a datagram QP attribute; RC QPs have none")
			}
			q.qkey = req.QKey
		}
		if to == proto.QPStateReset {
			discardPosted(q.sq)
			discardPosted(q.rq)
			q.sendSeg, q.blocked = 0, false
			q.reasm.reset()
			q.wrec.reset()
			q.rdReset() // rd_qp.go: a new life
		}
		if to == proto.QPStateError && from != to {
			q.errWhy = "the client moved it to ERROR (modify-qp)"
		}
		q.state = to
		return nil
	})
}

func (s *session) queryQP(body []byte, _ []int) (any, error) {
	var req proto.Handle
	if err := decode(body, &req); err != nil {
		return nil, err
	}
	var reply proto.QueryQPReply
	return &reply, s.eng.Do(func() error {
		q := s.qp(req.Handle)
		if q == nil {
			return errf(unix.EINVAL, "query-qp: no QP %d", req.Handle)
		}
		reply = proto.QueryQPReply{Type: q.typ, State: q.state, QPN: q.qpn, Addr: qpAddr(q), Caps: q.caps, QKey: q.qkey}
		return nil
	})
}

func (s *session) destroyQP(body []byte, _ []int) (any, error) {
	var req proto.Handle
	if err := decode(body, &req); err != nil {
		return nil, err
	}
	return nil, s.eng.Do(func() error {
		q := s.qp(req.Handle)
		if q == nil {
			return errf(unix.EINVAL, "destroy-qp: no QP %d", req.Handle)
		}
		delete(s.qps, req.Handle)
		q.e.removeQP(q.QP)
		closeQP(q.QP)
		s.qpHeld(q.typ).release() // userlimits.go
		q.pd.refs--
		q.sendCQ.refs--
		q.recvCQ.refs--
		if q.srq != nil {
			q.srq.refs--
		}
		return nil
	})
}
