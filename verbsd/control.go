package verbsd

import (
	"math"
	"time"

	"github.com/iwarpd/iwarpd/internal/shm"
	"github.com/iwarpd/iwarpd/proto"
	"github.com/iwarpd/iwarpd/verbsd/config"
	"github.com/iwarpd/iwarpd/verbsd/rnic"
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
		return rnic.Errf(unix.EINVAL, "%v", err)
	}
	return nil
}

// takeFD hands the request's descriptor i to the caller (who then owns it).
func takeFD(fds []int, i int, what string) (int, error) {
	if i >= len(fds) || fds[i] < 0 {
		return -1, rnic.Errf(unix.EINVAL, "%s: the request carries no descriptor %d", what, i)
	}
	fd := fds[i]
	fds[i] = -1
	return fd, nil
}

func (s *session) queryDevice([]byte, []int) (any, error) { return s.Dev.Cfg.DeviceAttr(), nil }

// queryPort says what the device serves and which ports this session may
// name: a client (the libfabric provider's fi_getinfo) refuses at once what
// create-qp and listen would (rnic/bind.go).
func (s *session) queryPort([]byte, []int) (any, error) {
	a := s.Dev.Cfg.PortAttr()
	a.UnprivPortStart, a.PrivBind = s.Dev.UnprivStart, s.PrivBind
	return a, nil
}

func (s *session) allocPD([]byte, []int) (any, error) {
	var reply proto.Handle
	return &reply, s.Eng.Do(func() error {
		if len(s.PDs) >= s.Dev.Cfg.Limits.MaxPD {
			return rnic.LimitErrf(unix.ENOMEM, "max-pd", "session limit of %d protection domains reached; raise it with -max-pd", s.Dev.Cfg.Limits.MaxPD)
		}
		h, err := s.NextHandleID()
		if err != nil {
			return err
		}
		s.PDs[h] = &rnic.PD{Handle: h}
		reply.Handle = h
		return nil
	})
}

func (s *session) deallocPD(body []byte, _ []int) (any, error) {
	var req proto.Handle
	if err := decode(body, &req); err != nil {
		return nil, err
	}
	return nil, s.Eng.Do(func() error {
		p := s.PDs[req.Handle]
		if p == nil {
			return rnic.Errf(unix.EINVAL, "no protection domain %d", req.Handle)
		}
		if p.Refs > 0 {
			return rnic.Errf(unix.EBUSY, "protection domain %d is in use by %d objects", req.Handle, p.Refs)
		}
		delete(s.PDs, req.Handle)
		return nil
	})
}

func (s *session) regMR(body []byte, fds []int) (any, error) {
	var req proto.RegMRRequest
	if err := decode(body, &req); err != nil {
		return nil, err
	}
	lim := s.Dev.Cfg.Limits
	switch {
	case req.Length == 0:
		return nil, rnic.Errf(unix.EINVAL, "reg-mr: zero length")
	case !req.Access.Valid():
		return nil, rnic.Errf(unix.EINVAL, "reg-mr: invalid access flags %#x", uint32(req.Access))
	case req.Length > lim.MaxMRSize:
		return nil, rnic.LimitErrf(unix.EINVAL, "max-mr-size", "%d octets exceed the daemon's largest memory region, "+
			"%d octets; raise it with -max-mr-size (docs/iwarpd.md)", req.Length, lim.MaxMRSize)
	case req.Addr > math.MaxUint64-req.Length:
		return nil, rnic.Errf(unix.EINVAL, "reg-mr: address range wraps")
	}
	if err := s.Dev.Users.Acquire(s.Session, config.ResRegistered, req.Length); err != nil { // rnic/userlimits.go
		return nil, err
	}
	var m *rnic.Mapping
	var pr *rnic.ProcRegion
	if req.Process {
		var err error
		if pr, err = s.processRegion(&req); err != nil {
			s.Dev.Users.Release(s.Session, config.ResRegistered, req.Length)
			return nil, err
		}
	} else {
		fd, err := takeFD(fds, 0, "reg-mr")
		if err == nil {
			m, err = rnic.MapRegion(fd, req.Offset, req.Length)
		}
		if err != nil {
			s.Dev.Users.Release(s.Session, config.ResRegistered, req.Length)
			return nil, err
		}
	}
	var reply proto.RegMRReply
	err := s.Eng.Do(func() error {
		p := s.PDs[req.PD]
		if p == nil {
			return rnic.Errf(unix.EINVAL, "reg-mr: no protection domain %d", req.PD)
		}
		if len(s.MRs) >= lim.MaxMR {
			return rnic.LimitErrf(unix.ENOMEM, "max-mr", "the daemon's limit of %d memory regions per session is reached "+
				"(%d registered octets in them); raise it with -max-mr (docs/iwarpd.md)", lim.MaxMR, s.RegBytes)
		}
		if s.RegBytes+req.Length > lim.MaxRegistered {
			return rnic.LimitErrf(unix.ENOMEM, "max-registered-bytes", "the daemon's limit of %d registered octets per session "+
				"is reached (%d held in %d memory regions, %d more asked); raise it with -max-registered-bytes (docs/iwarpd.md)",
				lim.MaxRegistered, s.RegBytes, len(s.MRs), req.Length)
		}
		h, err := s.NextHandleID()
		if err != nil {
			return err
		}
		lkey, rkey := s.NewMRKeys() // rnic/keys.go
		x := &rnic.MR{Handle: h, LKey: lkey, RKey: rkey, PD: p, Region: m, Proc: pr, Addr: req.Addr, Access: req.Access}
		if m != nil {
			x.Mem = m.Mem
		}
		s.MRs[h] = x
		s.AddMRKeys(x)
		p.Refs++
		s.RegBytes += req.Length
		reply = proto.RegMRReply{Handle: h, LKey: lkey, RKey: rkey}
		return nil
	})
	if err != nil {
		m.Close()
		s.Dev.Users.Release(s.Session, config.ResRegistered, req.Length)
		return nil, err
	}
	return &reply, nil
}

// processRegion checks a process-memory registration (rnic/procmem.go): no
// descriptor, Offset 0, the session's /proc/self/mem handed over at Hello,
// the session not stalled and its user not refused (rnic/procstrike.go),
// the range reachable (probed on the session's copier, within the bound:
// only this request waits for a page that does not come).
func (s *session) processRegion(req *proto.RegMRRequest) (*rnic.ProcRegion, error) {
	if req.Offset != 0 {
		return nil, rnic.Errf(unix.EINVAL, "reg-mr: a process-memory region has no offset (got %d)", req.Offset)
	}
	if req.Access&proto.AccessRemoteAtomic != 0 {
		// A remote atomic must be indivisible against the owning process's
		// own atomics on the word (rnic/semantics.go AtomicExecute): only memory
		// the daemon maps can give that, copies through /proc/PID/mem cannot.
		return nil, rnic.Errf(unix.EOPNOTSUPP, "reg-mr: remote atomic access needs memfd memory (an ofverbs Buffer), not process memory")
	}
	if s.Mem == nil {
		return nil, rnic.Errf(unix.EPERM, "reg-mr: process memory: this session handed over no /proc/self/mem at hello "+
			"(HelloRequest.ProcessMem); open the session with a client of ABI %d (docs/memory-registration.md)", proto.ABIVersion)
	}
	if s.Mem.Stalled() {
		return nil, rnic.Errf(unix.EPERM, "reg-mr: an access to this session's process memory stalled past -procmem-stall-timeout; "+
			"the session may register no more process memory: register resident memory in a new session, or shared buffers")
	}
	if err := s.Dev.Strikes.Refused(s.Cred.Uid, time.Now()); err != nil {
		return nil, err
	}
	if err := rnic.ProbeProcessRange(s.Mem, req.Addr, req.Length); err != nil {
		return nil, err
	}
	return &rnic.ProcRegion{Mem: s.Mem, Addr: req.Addr, Length: req.Length}, nil
}

func (s *session) deregMR(body []byte, _ []int) (any, error) {
	var req proto.Handle
	if err := decode(body, &req); err != nil {
		return nil, err
	}
	var size uint64
	err := s.Eng.Do(func() error {
		m := s.MRs[req.Handle]
		if m == nil {
			return rnic.Errf(unix.EINVAL, "no memory region %d", req.Handle)
		}
		delete(s.MRs, req.Handle)
		s.DropMRKeys(m)
		m.PD.Refs--
		size = m.Size()
		s.RegBytes -= size
		m.Region.Close() // no engine state refers to it between passes
		return nil
	})
	if err == nil {
		s.Dev.Users.Release(s.Session, config.ResRegistered, size)
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
	if err := rnic.CheckEventFD(fd); err != nil {
		unix.Close(fd)
		return nil, err
	}
	var reply proto.Handle
	err = s.Eng.Do(func() error {
		if len(s.Channels) >= s.Dev.Cfg.Limits.MaxCompChannel {
			return rnic.LimitErrf(unix.ENOMEM, "max-comp-channel", "session limit of %d completion channels reached; raise it with -max-comp-channel", s.Dev.Cfg.Limits.MaxCompChannel)
		}
		h, err := s.NextHandleID()
		if err != nil {
			return err
		}
		s.Channels[h] = &rnic.CompChannel{Handle: h, FD: fd}
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
	return nil, s.Eng.Do(func() error {
		ch := s.Channels[req.Handle]
		if ch == nil {
			return rnic.Errf(unix.EINVAL, "no completion channel %d", req.Handle)
		}
		if ch.Refs > 0 {
			return rnic.Errf(unix.EBUSY, "completion channel %d serves %d CQs", req.Handle, ch.Refs)
		}
		delete(s.Channels, req.Handle)
		unix.Close(ch.FD)
		return nil
	})
}

// mapRing maps descriptor fd and checks the ring header the client wrote.
func mapRing(fds []int, what string, kind proto.RingKind, depth, stride uint32) (*rnic.Mapping, *shm.Ring, error) {
	fd, err := takeFD(fds, 0, what)
	if err != nil {
		return nil, nil, err
	}
	m, err := rnic.MapRegion(fd, 0, uint64(proto.RingBytes(depth, stride)))
	if err != nil {
		return nil, nil, err
	}
	r, err := shm.NewRing(m.Mem, kind, depth, stride, false)
	if err != nil {
		m.Close()
		return nil, nil, rnic.Errf(unix.EINVAL, "%s: %v", what, err)
	}
	return m, r, nil
}

func (s *session) createCQ(body []byte, fds []int) (any, error) {
	var req proto.CreateCQRequest
	if err := decode(body, &req); err != nil {
		return nil, err
	}
	if !proto.ValidDepth(req.Depth) || int(req.Depth) > s.Dev.Cfg.Limits.MaxCQE {
		return nil, rnic.Errf(unix.EINVAL, "create-cq: depth %d: want a power of two up to %d", req.Depth, s.Dev.Cfg.Limits.MaxCQE)
	}
	m, ring, err := mapRing(fds, "create-cq", proto.RingCQ, req.Depth, proto.CQESize)
	if err != nil {
		return nil, err
	}
	var reply proto.Handle
	err = s.Eng.Do(func() error {
		var ch *rnic.CompChannel
		if req.Channel != 0 {
			if ch = s.Channels[req.Channel]; ch == nil {
				return rnic.Errf(unix.EINVAL, "create-cq: no completion channel %d", req.Channel)
			}
		}
		if len(s.CQs) >= s.Dev.Cfg.Limits.MaxCQ {
			return rnic.LimitErrf(unix.ENOMEM, "max-cq", "create-cq: session limit of %d CQs reached; raise it with -max-cq", s.Dev.Cfg.Limits.MaxCQ)
		}
		h, err := s.NextHandleID()
		if err != nil {
			return err
		}
		if ch != nil {
			ch.Refs++
		}
		s.CQs[h] = &rnic.CQ{Handle: h, Depth: req.Depth, Region: m, Ring: ring, Prod: shm.NewProducer(ring), Ch: ch}
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
	return nil, s.Eng.Do(func() error {
		c := s.CQs[req.Handle]
		if c == nil {
			return rnic.Errf(unix.EINVAL, "no CQ %d", req.Handle)
		}
		if c.Refs > 0 {
			return rnic.Errf(unix.EBUSY, "CQ %d is used by %d QPs", req.Handle, c.Refs)
		}
		delete(s.CQs, req.Handle)
		if c.Ch != nil {
			c.Ch.Refs--
		}
		c.Region.Close()
		return nil
	})
}

func (s *session) createSRQ(body []byte, fds []int) (any, error) {
	var req proto.CreateSRQRequest
	if err := decode(body, &req); err != nil {
		return nil, err
	}
	lim := s.Dev.Cfg.Limits
	if !proto.ValidDepth(req.MaxWR) || int(req.MaxWR) > lim.MaxSRQWR {
		return nil, rnic.Errf(unix.EINVAL, "create-srq: max_wr %d: want a power of two up to %d", req.MaxWR, lim.MaxSRQWR)
	}
	if req.MaxSGE == 0 || int(req.MaxSGE) > lim.MaxSGE {
		return nil, rnic.Errf(unix.EINVAL, "create-srq: max_sge %d: want 1..%d", req.MaxSGE, lim.MaxSGE)
	}
	m, ring, err := mapRing(fds, "create-srq", proto.RingSRQ, req.MaxWR, proto.RQEStride(req.MaxSGE))
	if err != nil {
		return nil, err
	}
	var reply proto.Handle
	err = s.Eng.Do(func() error {
		p := s.PDs[req.PD]
		if p == nil {
			return rnic.Errf(unix.EINVAL, "create-srq: no protection domain %d", req.PD)
		}
		if len(s.SRQs) >= lim.MaxSRQ {
			return rnic.LimitErrf(unix.ENOMEM, "max-srq", "create-srq: session limit of %d SRQs reached; raise it with -max-srq", lim.MaxSRQ)
		}
		h, err := s.NextHandleID()
		if err != nil {
			return err
		}
		s.SRQs[h] = &rnic.SRQ{Handle: h, PD: p, Region: m, Ring: ring, Cons: shm.NewConsumer(ring), MaxWR: req.MaxWR,
			MaxSGE: req.MaxSGE, Limit: req.Limit}
		p.Refs++
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
	return nil, s.Eng.Do(func() error {
		x := s.SRQs[req.Handle]
		if x == nil {
			return rnic.Errf(unix.EINVAL, "no SRQ %d", req.Handle)
		}
		if x.Refs > 0 {
			return rnic.Errf(unix.EBUSY, "SRQ %d is used by %d QPs", req.Handle, x.Refs)
		}
		delete(s.SRQs, req.Handle)
		x.PD.Refs--
		x.Region.Close()
		return nil
	})
}
