package verbsd

import (
	"github.com/iwarpd/iwarpd/internal/shm"
	"github.com/iwarpd/iwarpd/proto"
	"github.com/iwarpd/iwarpd/verbsd/rc"
	"github.com/iwarpd/iwarpd/verbsd/rd"
	"github.com/iwarpd/iwarpd/verbsd/rnic"
	"github.com/iwarpd/iwarpd/verbsd/ud"
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
		// merge_send_imm is RC's only (rc/imm.go): a datagram Send with
		// Immediate is one message already.
		// Connected with Connect/Accept (cm*.go): no socket until then.
		if req.Port != 0 || req.NoCRC || req.QKey != 0 || req.Socket {
			return nil, rnic.Errf(unix.EINVAL, "create-qp: port, no_crc, qkey and socket are datagram options; RC QPs negotiate with MPA")
		}
	case proto.QPTypeRD:
		if s.Dev.Cfg.RDPorts.Len() == 0 || s.Dev.Cfg.RDPorts.First == 0 {
			return nil, rnic.Errf(unix.EOPNOTSUPP, "create-qp: RD queue pairs are disabled (empty RD port range)")
		}
		if req.Port != 0 && s.Dev.Cfg.UDPorts.Contains(req.Port) {
			return nil, rnic.Errf(unix.EINVAL, "create-qp: port %d is in the UD range %d-%d (-ud-ports), kept for UD QPs; name another port or 0", req.Port, s.Dev.Cfg.UDPorts.First, s.Dev.Cfg.UDPorts.Last)
		}
	default:
		return nil, rnic.Errf(unix.EINVAL, "create-qp: unknown QP type %d", req.Type)
	}
	if req.MergeSendImm && req.Type != proto.QPTypeRC {
		return nil, rnic.Errf(unix.EINVAL, "create-qp: merge_send_imm is an RC option; a UD or RD Send with Immediate takes one receive already")
	}
	if req.HoldRecv && req.Type != proto.QPTypeRC {
		return nil, rnic.Errf(unix.EINVAL, "create-qp: hold_recv is an RC option; a datagram QP's receive backlog is its socket (docs/iwarpd.md)")
	}
	if req.QuietRecords && req.Type != proto.QPTypeRD {
		return nil, rnic.Errf(unix.EINVAL, "create-qp: quiet_records is an RD option (docs/write-record.md \"Quiet records\")")
	}
	if err := s.CheckClientPort("create-qp", req.Port); err != nil {
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
	if c.MaxRdAtomic > rd.RdMaxDepth || c.MaxDestRdAtomic > rd.RdMaxDepth {
		return nil, rnic.Errf(unix.EINVAL, "create-qp: max_rd_atomic %d / max_dest_rd_atomic %d: at most %d", c.MaxRdAtomic, c.MaxDestRdAtomic, rd.RdMaxDepth)
	}
	// A named port need not lie in the type's range (the range is the pool
	// of port 0): any port the client could bind itself (CheckClientPort)
	// works, as bind(2) would for it, except the other type's pool.
	if req.Type == proto.QPTypeUD && req.Port != 0 && s.Dev.Cfg.RDPorts.Len() > 0 && s.Dev.Cfg.RDPorts.Contains(req.Port) {
		return nil, rnic.Errf(unix.EINVAL, "create-qp: port %d is in the RD range %d-%d (-rd-ports), kept for RD QPs; name another port or 0", req.Port, s.Dev.Cfg.RDPorts.First, s.Dev.Cfg.RDPorts.Last)
	}
	sqStride := proto.SQEStride(c.MaxSendSGE, c.MaxInline)
	rqStride := proto.RQEStride(c.MaxRecvSGE)
	sqBytes := proto.RingBytes(c.MaxSendWR, sqStride)
	size := sqBytes
	if req.SRQ == 0 {
		size += proto.RingBytes(c.MaxRecvWR, rqStride)
	}
	held, err := s.HoldQP(portsOf(req.Type)) // rnic/userlimits.go
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
	core := &rnic.QP{Session: s.Session, Caps: c, SigAll: req.SigAll, State: proto.QPStateReset, Region: m, FD: -1,
		MaxRecvS: c.MaxRecvSGE, Type: req.Type}
	var t transportQP
	fail := func(err error) (any, error) {
		rnic.CloseQP(core)
		return nil, err
	}
	if req.Type == proto.QPTypeRC {
		t = rc.NewQP(core, req.NoCRC, req.MergeSendImm, req.HoldRecv) // rc/qp.go
	} else {
		q := ud.NewQP(core) // ud/qp.go
		q.NoCRC, q.Qkey, q.QuietRecords = req.NoCRC, req.QKey, req.QuietRecords
		if q.Qkey == 0 {
			q.Qkey = rnic.RandomU32() // rnic/keys.go; the client learns it from the reply
		}
		t = q
	}
	sqRing, err := shm.NewRing(m.Mem[:sqBytes], proto.RingSQ, c.MaxSendWR, sqStride, false)
	if err != nil {
		return fail(rnic.Errf(unix.EINVAL, "create-qp: send queue: %v", err))
	}
	core.SQ = shm.NewConsumer(sqRing)
	if req.SRQ == 0 {
		rqRing, err := shm.NewRing(m.Mem[sqBytes:], proto.RingRQ, c.MaxRecvWR, rqStride, false)
		if err != nil {
			return fail(rnic.Errf(unix.EINVAL, "create-qp: receive queue: %v", err))
		}
		core.RQ = shm.NewConsumer(rqRing)
	}
	switch {
	case req.Socket: // control_qpsock.go: the client's own socket
		if err := s.adoptSocket(core, req.Port, fds); err != nil {
			return fail(err)
		}
	case req.Type == proto.QPTypeUD:
		if core.FD, core.Local, err = ud.BindUD(s.Dev, req.Port, s.PrivBind, s.ID); err != nil {
			return fail(err)
		}
	case req.Type == proto.QPTypeRD:
		if core.FD, core.Local, err = rd.BindRD(s.Session, req.Port); err != nil { // rd/linger.go: a lingering port is taken over
			return fail(err)
		}
	}
	if req.Type == proto.QPTypeRD { // rd/qp.go
		t = rd.NewQP(t.(*ud.QP), s.Dev.Cfg, c)
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
			core.MaxRecvS = x.MaxSGE
		}
		if len(s.QPs) >= lim.MaxQP {
			return rnic.LimitErrf(unix.ENOMEM, "max-qp", "create-qp: session limit of %d QPs reached; raise it with -max-qp", lim.MaxQP)
		}
		h, err := s.NextHandleID()
		if err != nil {
			return err
		}
		core.Handle, core.PD, core.SendCQ, core.RecvCQ, core.SRQ = h, p, scq, rcq, x
		core.Eng = s.Dev.Place() // rnic/engines.go
		if err := t.Install(core.Eng); err != nil {
			return err
		}
		p.Refs++
		scq.Refs++
		rcq.Refs++
		if x != nil {
			x.Refs++
		}
		s.QPs[h] = core
		reply = proto.CreateQPReply{Handle: h, QPN: core.QPN, Addr: addrString(t), QKey: t.QKey()}
		return nil
	})
	if err != nil {
		return fail(err)
	}
	created = true
	return &reply, nil
}

func (s *session) modifyQP(body []byte, _ []int) (any, error) {
	var req proto.ModifyQPRequest
	if err := decode(body, &req); err != nil {
		return nil, err
	}
	return nil, s.Eng.Do(func() error {
		q := s.QPs[req.QP]
		if q == nil {
			return rnic.Errf(unix.EINVAL, "modify-qp: no QP %d", req.QP)
		}
		t := transportOf(q)
		from, to := q.State, req.State
		if err := t.CheckModify(to, req.QKey); err != nil { // e.g. RC: connected by the CM
			return err
		}
		if q.SockDead && to != proto.QPStateError { // rnic/qpsock.go SocketFailed
			return rnic.Errf(unix.EINVAL, "modify-qp: QP %d stays in ERROR: its socket (the client's own) failed (%s); destroy it and create another", req.QP, q.ErrWhy)
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
		if to == proto.QPStateReset {
			rnic.DiscardPosted(q.SQ)
			rnic.DiscardPosted(q.RQ)
			q.Blocked = false
		}
		t.Modified(to, req.QKey) // a new Q_Key; RESET: a new life
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
		q := s.QPs[req.Handle]
		if q == nil {
			return rnic.Errf(unix.EINVAL, "query-qp: no QP %d", req.Handle)
		}
		t := transportOf(q)
		reply = proto.QueryQPReply{Type: q.Type, State: q.State, QPN: q.QPN, Addr: addrString(t), Caps: q.Caps, QKey: t.QKey()}
		return nil
	})
}

func (s *session) destroyQP(body []byte, _ []int) (any, error) {
	var req proto.Handle
	if err := decode(body, &req); err != nil {
		return nil, err
	}
	return nil, s.Eng.Do(func() error {
		q := s.QPs[req.Handle]
		if q == nil {
			return rnic.Errf(unix.EINVAL, "destroy-qp: no QP %d", req.Handle)
		}
		delete(s.QPs, req.Handle)
		q.Eng.RemoveQP(q)
		rnic.CloseQP(q)
		s.QPHeld(portsOf(q.Type)).Release() // rnic/userlimits.go
		q.PD.Refs--
		q.SendCQ.Refs--
		q.RecvCQ.Refs--
		if q.SRQ != nil {
			q.SRQ.Refs--
		}
		return nil
	})
}

// portsOf is how many ports a QP of type t binds (counted against the
// user's limit of ports): a datagram QP its UDP port, an RC QP none (its
// connection's socket is the CM's).
func portsOf(t proto.QPType) uint64 {
	if t == proto.QPTypeRC {
		return 0
	}
	return 1
}
