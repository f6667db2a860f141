package verbsd

import (
	"math"

	"github.com/iwarpd/iwarpd/internal/shm"
	"github.com/iwarpd/iwarpd/proto"
	"github.com/iwarpd/iwarpd/verbsd/config"
	"golang.org/x/sys/unix"
)

type handlerFunc func(s *session, body []byte, fds []int) (any, error)

var handlers map[proto.Op]handlerFunc

func init() {
	handlers = map[proto.Op]handlerFunc{
		proto.OpQueryDevice:        (*session).queryDevice,
		proto.OpQueryPort:          (*session).queryPort,
		proto.OpAllocPD:            (*session).allocPD,
		proto.OpDeallocPD:          (*session).deallocPD,
		proto.OpRegMR:              (*session).regMR,
		proto.OpDeregMR:            (*session).deregMR,
		proto.OpCreateCompChannel:  (*session).createCompChannel,
		proto.OpDestroyCompChannel: (*session).destroyCompChannel,
		proto.OpCreateCQ:           (*session).createCQ,
		proto.OpDestroyCQ:          (*session).destroyCQ,
		proto.OpCreateQP:           (*session).createQP,
		proto.OpModifyQP:           (*session).modifyQP,
		proto.OpQueryQP:            (*session).queryQP,
		proto.OpDestroyQP:          (*session).destroyQP,
		proto.OpCreateSRQ:          (*session).createSRQ,
		proto.OpDestroySRQ:         (*session).destroySRQ,
		proto.OpInspect:            (*session).inspectOp,
	}
}

func decode(body []byte, v any) error {
	if err := proto.Unmarshal(body, v); err != nil {
		return errf(unix.EINVAL, "%v", err)
	}
	return nil
}

// takeFD hands the request's descriptor i to the caller (who then owns it).
func takeFD(fds []int, i int, what string) (int, error) {
	if i >= len(fds) || fds[i] < 0 {
		return -1, errf(unix.EINVAL, "%s: the request carries no descriptor %d", what, i)
	}
	fd := fds[i]
	fds[i] = -1
	return fd, nil
}

func (s *session) queryDevice([]byte, []int) (any, error) { return s.dev.cfg.DeviceAttr(), nil }
func (s *session) queryPort([]byte, []int) (any, error)   { return s.dev.cfg.PortAttr(), nil }

func (s *session) allocPD([]byte, []int) (any, error) {
	var reply proto.Handle
	return &reply, s.eng.Do(func() error {
		if len(s.pds) >= s.dev.cfg.Limits.MaxPD {
			return errf(unix.ENOMEM, "session limit of %d protection domains reached", s.dev.cfg.Limits.MaxPD)
		}
		h, err := s.nextHandleID()
		if err != nil {
			return err
		}
		s.pds[h] = &pd{handle: h}
		reply.Handle = h
		return nil
	})
}

func (s *session) deallocPD(body []byte, _ []int) (any, error) {
	var req proto.Handle
	if err := decode(body, &req); err != nil {
		return nil, err
	}
	return nil, s.eng.Do(func() error {
		p := s.pds[req.Handle]
		if p == nil {
			return errf(unix.EINVAL, "no protection domain %d", req.Handle)
		}
		if p.refs > 0 {
			return errf(unix.EBUSY, "protection domain %d is in use by %d objects", req.Handle, p.refs)
		}
		delete(s.pds, req.Handle)
		return nil
	})
}

func (s *session) regMR(body []byte, fds []int) (any, error) {
	var req proto.RegMRRequest
	if err := decode(body, &req); err != nil {
		return nil, err
	}
	lim := s.dev.cfg.Limits
	switch {
	case req.Length == 0:
		return nil, errf(unix.EINVAL, "reg-mr: zero length")
	case !req.Access.Valid():
		return nil, errf(unix.EINVAL, "reg-mr: invalid access flags %#x", uint32(req.Access))
	case req.Length > lim.MaxMRSize:
		return nil, errf(unix.EINVAL, "reg-mr: %d octets exceed the device's largest region (%d)", req.Length, lim.MaxMRSize)
	case req.Addr > math.MaxUint64-req.Length:
		return nil, errf(unix.EINVAL, "reg-mr: address range wraps")
	}
	if err := s.dev.users.acquire(s.Session, config.ResRegistered, req.Length); err != nil { // userlimits.go
		return nil, err
	}
	var m *mapping
	var pr *procRegion
	if req.Process {
		var err error
		if pr, err = s.processRegion(&req); err != nil {
			s.dev.users.release(s.Session, config.ResRegistered, req.Length)
			return nil, err
		}
	} else {
		fd, err := takeFD(fds, 0, "reg-mr")
		if err == nil {
			m, err = mapRegion(fd, req.Offset, req.Length)
		}
		if err != nil {
			s.dev.users.release(s.Session, config.ResRegistered, req.Length)
			return nil, err
		}
	}
	var reply proto.RegMRReply
	err := s.eng.Do(func() error {
		p := s.pds[req.PD]
		if p == nil {
			return errf(unix.EINVAL, "reg-mr: no protection domain %d", req.PD)
		}
		if len(s.mrs) >= lim.MaxMR {
			return errf(unix.ENOMEM, "reg-mr: session limit of %d memory regions reached", lim.MaxMR)
		}
		if s.regBytes+req.Length > lim.MaxRegistered {
			return errf(unix.ENOMEM, "reg-mr: session limit of %d registered octets reached", lim.MaxRegistered)
		}
		h, err := s.nextHandleID()
		if err != nil {
			return err
		}
		lkey, rkey := s.newMRKeys() // keys.go
		x := &mr{handle: h, lkey: lkey, rkey: rkey, pd: p, region: m, proc: pr, addr: req.Addr, access: req.Access}
		if m != nil {
			x.mem = m.mem
		}
		s.mrs[h] = x
		s.addMRKeys(x)
		p.refs++
		s.regBytes += req.Length
		reply = proto.RegMRReply{Handle: h, LKey: lkey, RKey: rkey}
		return nil
	})
	if err != nil {
		m.Close()
		s.dev.users.release(s.Session, config.ResRegistered, req.Length)
		return nil, err
	}
	return &reply, nil
}

// processRegion checks a process-memory registration (procmem.go): no
// descriptor, Offset 0, the session's peer pinned, the range reachable.
func (s *session) processRegion(req *proto.RegMRRequest) (*procRegion, error) {
	if req.Offset != 0 {
		return nil, errf(unix.EINVAL, "reg-mr: a process-memory region has no offset (got %d)", req.Offset)
	}
	if req.Access&proto.AccessRemoteAtomic != 0 {
		// A remote atomic must be indivisible against the owning process's
		// own atomics on the word (rc_atomic.go atomicExecute): only memory
		// the daemon maps can give that, process_vm_* cannot.
		return nil, errf(unix.EOPNOTSUPP, "reg-mr: remote atomic access needs memfd memory (an ofverbs Buffer), not process memory")
	}
	if s.peer == nil {
		return nil, errf(unix.EPERM, "reg-mr: process memory: the client process could not be pinned at hello (%v)", s.peerErr)
	}
	if err := probeProcessRange(s.peer, req.Addr, req.Length); err != nil {
		return nil, err
	}
	return &procRegion{peer: s.peer, addr: req.Addr, length: req.Length}, nil
}

func (s *session) deregMR(body []byte, _ []int) (any, error) {
	var req proto.Handle
	if err := decode(body, &req); err != nil {
		return nil, err
	}
	var size uint64
	err := s.eng.Do(func() error {
		m := s.mrs[req.Handle]
		if m == nil {
			return errf(unix.EINVAL, "no memory region %d", req.Handle)
		}
		delete(s.mrs, req.Handle)
		s.dropMRKeys(m)
		m.pd.refs--
		size = m.size()
		s.regBytes -= size
		m.region.Close() // no engine state refers to it between passes
		return nil
	})
	if err == nil {
		s.dev.users.release(s.Session, config.ResRegistered, size)
	}
	return nil, err
}

func (s *session) createCompChannel(body []byte, fds []int) (any, error) {
	var req proto.CreateCompChannelRequest
	if err := decode(body, &req); err != nil {
		return nil, err
	}
	fd, err := takeFD(fds, 0, "create-comp-channel")
	if err != nil {
		return nil, err
	}
	if err := checkEventFD(fd); err != nil {
		unix.Close(fd)
		return nil, err
	}
	var reply proto.Handle
	err = s.eng.Do(func() error {
		if len(s.channels) >= s.dev.cfg.Limits.MaxCompChannel {
			return errf(unix.ENOMEM, "session limit of %d completion channels reached", s.dev.cfg.Limits.MaxCompChannel)
		}
		h, err := s.nextHandleID()
		if err != nil {
			return err
		}
		s.channels[h] = &compChannel{handle: h, fd: fd}
		reply.Handle = h
		return nil
	})
	if err != nil {
		unix.Close(fd)
		return nil, err
	}
	return &reply, nil
}

func (s *session) destroyCompChannel(body []byte, _ []int) (any, error) {
	var req proto.Handle
	if err := decode(body, &req); err != nil {
		return nil, err
	}
	return nil, s.eng.Do(func() error {
		ch := s.channels[req.Handle]
		if ch == nil {
			return errf(unix.EINVAL, "no completion channel %d", req.Handle)
		}
		if ch.refs > 0 {
			return errf(unix.EBUSY, "completion channel %d serves %d CQs", req.Handle, ch.refs)
		}
		delete(s.channels, req.Handle)
		unix.Close(ch.fd)
		return nil
	})
}

// mapRing maps descriptor fd and checks the ring header the client wrote.
func mapRing(fds []int, what string, kind proto.RingKind, depth, stride uint32) (*mapping, *shm.Ring, error) {
	fd, err := takeFD(fds, 0, what)
	if err != nil {
		return nil, nil, err
	}
	m, err := mapRegion(fd, 0, uint64(proto.RingBytes(depth, stride)))
	if err != nil {
		return nil, nil, err
	}
	r, err := shm.NewRing(m.mem, kind, depth, stride, false)
	if err != nil {
		m.Close()
		return nil, nil, errf(unix.EINVAL, "%s: %v", what, err)
	}
	return m, r, nil
}

func (s *session) createCQ(body []byte, fds []int) (any, error) {
	var req proto.CreateCQRequest
	if err := decode(body, &req); err != nil {
		return nil, err
	}
	if !proto.ValidDepth(req.Depth) || int(req.Depth) > s.dev.cfg.Limits.MaxCQE {
		return nil, errf(unix.EINVAL, "create-cq: depth %d: want a power of two up to %d", req.Depth, s.dev.cfg.Limits.MaxCQE)
	}
	m, ring, err := mapRing(fds, "create-cq", proto.RingCQ, req.Depth, proto.CQESize)
	if err != nil {
		return nil, err
	}
	var reply proto.Handle
	err = s.eng.Do(func() error {
		var ch *compChannel
		if req.Channel != 0 {
			if ch = s.channels[req.Channel]; ch == nil {
				return errf(unix.EINVAL, "create-cq: no completion channel %d", req.Channel)
			}
		}
		if len(s.cqs) >= s.dev.cfg.Limits.MaxCQ {
			return errf(unix.ENOMEM, "create-cq: session limit of %d CQs reached", s.dev.cfg.Limits.MaxCQ)
		}
		h, err := s.nextHandleID()
		if err != nil {
			return err
		}
		if ch != nil {
			ch.refs++
		}
		s.cqs[h] = &cq{handle: h, depth: req.Depth, region: m, ring: ring, prod: shm.NewProducer(ring), ch: ch}
		reply.Handle = h
		return nil
	})
	if err != nil {
		m.Close()
		return nil, err
	}
	return &reply, nil
}

func (s *session) destroyCQ(body []byte, _ []int) (any, error) {
	var req proto.Handle
	if err := decode(body, &req); err != nil {
		return nil, err
	}
	return nil, s.eng.Do(func() error {
		c := s.cqs[req.Handle]
		if c == nil {
			return errf(unix.EINVAL, "no CQ %d", req.Handle)
		}
		if c.refs > 0 {
			return errf(unix.EBUSY, "CQ %d is used by %d QPs", req.Handle, c.refs)
		}
		delete(s.cqs, req.Handle)
		if c.ch != nil {
			c.ch.refs--
		}
		c.region.Close()
		return nil
	})
}

func (s *session) createSRQ(body []byte, fds []int) (any, error) {
	var req proto.CreateSRQRequest
	if err := decode(body, &req); err != nil {
		return nil, err
	}
	lim := s.dev.cfg.Limits
	if !proto.ValidDepth(req.MaxWR) || int(req.MaxWR) > lim.MaxSRQWR {
		return nil, errf(unix.EINVAL, "create-srq: max_wr %d: want a power of two up to %d", req.MaxWR, lim.MaxSRQWR)
	}
	if req.MaxSGE == 0 || int(req.MaxSGE) > lim.MaxSGE {
		return nil, errf(unix.EINVAL, "create-srq: max_sge %d: want 1..%d", req.MaxSGE, lim.MaxSGE)
	}
	m, ring, err := mapRing(fds, "create-srq", proto.RingSRQ, req.MaxWR, proto.RQEStride(req.MaxSGE))
	if err != nil {
		return nil, err
	}
	var reply proto.Handle
	err = s.eng.Do(func() error {
		p := s.pds[req.PD]
		if p == nil {
			return errf(unix.EINVAL, "create-srq: no protection domain %d", req.PD)
		}
		if len(s.srqs) >= lim.MaxSRQ {
			return errf(unix.ENOMEM, "create-srq: session limit of %d SRQs reached", lim.MaxSRQ)
		}
		h, err := s.nextHandleID()
		if err != nil {
			return err
		}
		s.srqs[h] = &srq{handle: h, pd: p, region: m, ring: ring, cons: shm.NewConsumer(ring), maxWR: req.MaxWR,
			maxSGE: req.MaxSGE, limit: req.Limit}
		p.refs++
		reply.Handle = h
		return nil
	})
	if err != nil {
		m.Close()
		return nil, err
	}
	return &reply, nil
}

func (s *session) destroySRQ(body []byte, _ []int) (any, error) {
	var req proto.Handle
	if err := decode(body, &req); err != nil {
		return nil, err
	}
	return nil, s.eng.Do(func() error {
		x := s.srqs[req.Handle]
		if x == nil {
			return errf(unix.EINVAL, "no SRQ %d", req.Handle)
		}
		if x.refs > 0 {
			return errf(unix.EBUSY, "SRQ %d is used by %d QPs", req.Handle, x.refs)
		}
		delete(s.srqs, req.Handle)
		x.pd.refs--
		x.region.Close()
		return nil
	})
}
