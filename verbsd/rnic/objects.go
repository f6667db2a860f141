package rnic

import (
	"math"
	"net/netip"
	"sync"
	"sync/atomic"

	"github.com/iwarpd/iwarpd/internal/shm"
	"github.com/iwarpd/iwarpd/proto"
	"golang.org/x/sys/unix"
)

// The verbs objects of a session. They are owned by the engine goroutine:
// control goroutines create and destroy them only inside engine.Do.

type PD struct {
	Handle uint32
	Refs   int // MRs, QPs, SRQs using it
}

type MR struct {
	Handle uint32
	LKey   uint32 // names the MR in its owner's work requests (rnic/keys.go)
	RKey   uint32 // the STag remote peers name it by; never equal to lkey
	PD     *PD
	Region *Mapping    // memfd form: the daemon's mapping (nil for process memory)
	Mem    []byte      // memfd form: the registered octets, inside region.Mem
	Proc   *ProcRegion // process form: the octets in the client's address space (rnic/procmem.go)
	Addr   uint64      // where the client has the first registered octet
	Access proto.Access
	// Invalid: the STag was invalidated (RC local invalidate or Send with
	// Invalidate); it stays unusable, locally and remotely, until deregistered.
	Invalid atomic.Bool
}

type CompChannel struct {
	Handle uint32
	FD     int // the client's eventfd
	Refs   int // CQs bound to it
}

type CQ struct {
	// mu serializes production when QPs of several engines complete into
	// it (rnic/engines.go; PostCQE, overrunCQ).
	mu      sync.Mutex
	Handle  uint32
	Depth   uint32
	Region  *Mapping
	Ring    *shm.Ring
	Prod    *shm.Producer
	Ch      *CompChannel
	Refs    int  // QPs using it
	overrun bool // overflowed: unusable, its completions are dropped
}

type SRQ struct {
	// mu serializes consumption when QPs of several engines take receives
	// from it: held for the whole service of such a QP (rnic/engines.go).
	mu     sync.Mutex
	Handle uint32
	PD     *PD
	Region *Mapping
	Ring   *shm.Ring
	Cons   *shm.Consumer
	MaxWR  uint32
	MaxSGE uint32
	Limit  uint32 // SRQ limit event armed when > 0
	Refs   int    // QPs using it
}

// Translate turns (lkey, addr, length) of a work request into the daemon's
// view of those octets, checking that the key belongs to this session and
// pd, that [addr, addr+length) lies inside the region (overflow-safe) and
// that the region grants write access if write is set. It returns a status
// other than WCSuccess on any failure. The view is good for the service of
// the current QP: the mapping of a memfd region, or a staging buffer of a
// process region (rnic/stage.go: a source read from the process now, a
// destination written back by commit).
func (q *QP) Translate(sge proto.SGE, p *PD, write bool) ([]byte, proto.WCStatus) {
	s := q.Session
	m, off, st := s.checkSGE(sge, p, write, false) // a source is read right away: no probe first
	if st != proto.WCSuccess {
		return nil, st
	}
	if m.Proc != nil {
		return q.Eng.stage(s, m.Proc, off, uint64(sge.Length), !write)
	}
	return m.Mem[off : off+uint64(sge.Length) : off+uint64(sge.Length)], proto.WCSuccess
}

// SubSGE is octets [from, from+n) of sge (within it: the caller checked).
func SubSGE(sge proto.SGE, from, n uint64) proto.SGE {
	return proto.SGE{Addr: sge.Addr + from, Length: uint32(n), LKey: sge.LKey}
}

// CheckSGE is translate's checks alone (for work requests validated before
// their octets are used): the region and the offset of addr in it. A
// source in process memory is probed (its first and last octets readable).
func (s *Session) CheckSGE(sge proto.SGE, p *PD, write bool) (*MR, uint64, proto.WCStatus) {
	return s.checkSGE(sge, p, write, true)
}

func (s *Session) checkSGE(sge proto.SGE, p *PD, write, probe bool) (*MR, uint64, proto.WCStatus) {
	m := s.mrByLKey(sge.LKey)
	if m == nil || m.PD != p || m.Invalid.Load() {
		return nil, 0, proto.WCLocProtErr
	}
	if write && m.Access&proto.AccessLocalWrite == 0 {
		return nil, 0, proto.WCLocProtErr
	}
	if sge.Addr < m.Addr {
		return nil, 0, proto.WCLocProtErr
	}
	off := sge.Addr - m.Addr
	if off > m.Size() || uint64(sge.Length) > m.Size()-off {
		return nil, 0, proto.WCLocProtErr
	}
	if probe && m.Proc != nil && !write && m.Proc.probe(off, uint64(sge.Length)) != nil {
		// A source in process memory that is gone fails at once, before
		// anything of it is sent (rnic/procmem.go).
		return nil, 0, proto.WCLocProtErr
	}
	return m, off, proto.WCSuccess
}

// Size is the number of registered octets of m.
func (m *MR) Size() uint64 {
	if m.Proc != nil {
		return m.Proc.Length
	}
	return uint64(len(m.Mem))
}

// AddrToSockaddr converts an address for sendmsg.
func AddrToSockaddr(a netip.AddrPort) unix.Sockaddr {
	ip := a.Addr()
	if ip.Is4() || ip.Is4In6() {
		return &unix.SockaddrInet4{Port: int(a.Port()), Addr: ip.Unmap().As4()}
	}
	return &unix.SockaddrInet6{Port: int(a.Port()), Addr: ip.As16()}
}

// NextHandleID allocates a session handle: from 1 upward, never reused.
// Handles name objects on the control socket only: MR keys are random and
// unrelated to them (rnic/keys.go). The bound keeps handles within 24 bits.
func (s *Session) NextHandleID() (uint32, error) {
	if s.lastHandle >= math.MaxUint32>>8 {
		return 0, Errf(unix.ENOMEM, "session handle space exhausted")
	}
	s.lastHandle++
	return s.lastHandle, nil
}
