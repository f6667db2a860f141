package ofverbs

import (
	"fmt"
	"net/netip"
	"sync"
	"sync/atomic"
	"unsafe"

	"github.com/iwarpd/iwarpd/internal/shm"
	"github.com/iwarpd/iwarpd/proto"
	"golang.org/x/sys/unix"
)

// Buffer is shared memory for data: only memory of a Buffer can be
// registered (RegMR), because the daemon must be able to map it.
type Buffer struct {
	ctx    *Context
	mu     sync.Mutex
	region *shm.Region
	mem    []byte
	base   uint64
	size   int
}

// AllocBuffer allocates a zeroed Buffer of size bytes (a sealed memfd mapped
// into this process; the region is rounded up to whole pages, Bytes is
// exactly size long).
func (c *Context) AllocBuffer(size int) (*Buffer, error) {
	if size <= 0 {
		return nil, newError("alloc-buffer", unix.EINVAL, "size %d", size)
	}
	if err := c.sessionErr("alloc-buffer"); err != nil {
		return nil, err
	}
	reg, err := shm.Create("buffer", size)
	if err != nil {
		return nil, &Error{Op: "alloc-buffer", Errno: errnoOf(err, unix.ENOMEM), Msg: err.Error()}
	}
	b := &Buffer{ctx: c, region: reg, mem: reg.Mem[:size:size], base: addrOf(reg.Mem), size: size}
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		reg.Close()
		return nil, closedError("alloc-buffer", "context")
	}
	c.buffers[b] = struct{}{}
	c.mu.Unlock()
	return b, nil
}

// Bytes returns the buffer's memory (nil once closed).
func (b *Buffer) Bytes() []byte {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.mem
}

// Len returns the buffer's size.
func (b *Buffer) Len() int { return b.size }

// Close unmaps the buffer. Memory regions registered on it stay valid in the
// daemon until deregistered, but this process must not touch the slices any
// more. Idempotent.
func (b *Buffer) Close() error {
	b.ctx.mu.Lock()
	delete(b.ctx.buffers, b)
	b.ctx.mu.Unlock()
	return b.release()
}

func (b *Buffer) release() error {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.region == nil {
		return nil
	}
	err := b.region.Close()
	b.region, b.mem = nil, nil
	if err != nil {
		return &Error{Op: "free-buffer", Errno: errnoOf(err, unix.EINVAL), Msg: err.Error()}
	}
	return nil
}

func addrOf(b []byte) uint64 { return uint64(uintptr(unsafe.Pointer(unsafe.SliceData(b)))) }

// within reports whether [addr, addr+n) lies inside [base, base+size) and
// returns its offset there.
func within(addr, n, base, size uint64) (uint64, bool) {
	if addr < base {
		return 0, false
	}
	off := addr - base
	if off > size || n > size-off {
		return 0, false
	}
	return off, true
}

// findBuffer returns the buffer holding [addr, addr+n) and its region, with
// the offset of addr in it.
func (c *Context) findBuffer(addr, n uint64) (*Buffer, uint64, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for b := range c.buffers {
		if off, ok := within(addr, n, b.base, uint64(b.size)); ok {
			return b, off, true
		}
	}
	return nil, 0, false
}

// PD is a protection domain.
type PD struct {
	ctx     *Context
	handle  uint32
	closeMu sync.Mutex
	closed  atomic.Bool
}

// AllocPD allocates a protection domain.
func (c *Context) AllocPD() (*PD, error) {
	var h proto.Handle
	if err := c.call(proto.OpAllocPD, nil, &h); err != nil {
		return nil, err
	}
	pd := &PD{ctx: c, handle: h.Handle}
	c.mu.Lock()
	c.pds[pd] = struct{}{}
	c.mu.Unlock()
	return pd, nil
}

// Handle returns the daemon's handle of the PD.
func (pd *PD) Handle() uint32 { return pd.handle }

// Close deallocates the PD. It fails with EBUSY while MRs, QPs, AHs or SRQs
// use it. Idempotent.
func (pd *PD) Close() error {
	pd.closeMu.Lock()
	defer pd.closeMu.Unlock()
	if pd.closed.Load() {
		return nil
	}
	if err := pd.ctx.destroy(proto.OpDeallocPD, pd.handle); err != nil {
		return err
	}
	pd.closed.Store(true)
	pd.ctx.mu.Lock()
	delete(pd.ctx.pds, pd)
	pd.ctx.mu.Unlock()
	return nil
}

func (pd *PD) check(op string) error {
	if pd == nil || pd.closed.Load() {
		return closedError(op, "protection domain")
	}
	return nil
}

// MR is a registered memory region.
type MR struct {
	ctx     *Context
	pd      *PD
	handle  uint32
	lkey    uint32
	rkey    uint32
	access  Access
	mem     []byte
	addr    uint64
	process bool // registered as process memory (RegMR)
	closeMu sync.Mutex
	closed  atomic.Bool
}

// RegMR registers b with the given access rights, in one of two forms
// (docs/memory-registration.md):
//
//   - b inside one Buffer of this Context (AllocBuffer): the daemon maps the
//     Buffer's memfd, the zero-copy fast path;
//   - any other memory of this process (Go heap, a C allocation, a static
//     array): the daemon reaches it with pread/pwrite on this process's
//     /proc/self/mem, which Open handed it at hello, one copy more per
//     transfer (proto.RegMRRequest.Process). The MR keeps b reachable
//     until Close (Go's collector does not move heap objects); memory the
//     program unmaps (syscall.Munmap, C free of an mmap'd block) while
//     registered makes the work requests and remote accesses touching it
//     fail with an access error. The memory must be resident or come
//     quickly: an access that takes longer than the daemon's bound fails
//     and ends the session's process memory (docs/memory-registration.md).
func (pd *PD) RegMR(b []byte, access Access) (*MR, error) {
	const op = "reg-mr"
	if err := pd.check(op); err != nil {
		return nil, err
	}
	if len(b) == 0 {
		return nil, newError(op, unix.EINVAL, "empty memory region")
	}
	addr := addrOf(b)
	buf, off, ok := pd.ctx.findBuffer(addr, uint64(len(b)))
	if !ok {
		return pd.regProcessMR(b, addr, access)
	}
	// A duplicate of the region's descriptor travels, so that the buffer
	// need not stay locked during the round trip.
	buf.mu.Lock()
	fd := -1
	var err error
	if buf.region != nil {
		fd, err = unix.FcntlInt(uintptr(buf.region.FD()), unix.F_DUPFD_CLOEXEC, 0)
	}
	buf.mu.Unlock()
	if fd < 0 {
		if err != nil {
			return nil, &Error{Op: op, Errno: errnoOf(err, unix.EMFILE), Msg: err.Error()}
		}
		return nil, closedError(op, "buffer")
	}
	defer unix.Close(fd)
	req := proto.RegMRRequest{PD: pd.handle, Offset: off, Length: uint64(len(b)), Addr: addr, Access: access}
	var rep proto.RegMRReply
	if err := pd.ctx.call(proto.OpRegMR, req, &rep, fd); err != nil {
		return nil, err
	}
	mr := &MR{ctx: pd.ctx, pd: pd, handle: rep.Handle, lkey: rep.LKey, rkey: rep.RKey, access: access,
		mem: b[:len(b):len(b)], addr: addr}
	pd.ctx.mu.Lock()
	pd.ctx.mrs[mr] = struct{}{}
	pd.ctx.mu.Unlock()
	return mr, nil
}

// regProcessMR registers memory of this process that no Buffer holds.
func (pd *PD) regProcessMR(b []byte, addr uint64, access Access) (*MR, error) {
	req := proto.RegMRRequest{PD: pd.handle, Length: uint64(len(b)), Addr: addr, Access: access, Process: true}
	var rep proto.RegMRReply
	if err := pd.ctx.call(proto.OpRegMR, req, &rep); err != nil {
		return nil, err
	}
	mr := &MR{ctx: pd.ctx, pd: pd, handle: rep.Handle, lkey: rep.LKey, rkey: rep.RKey, access: access,
		mem: b[:len(b):len(b)], addr: addr, process: true}
	pd.ctx.mu.Lock()
	pd.ctx.mrs[mr] = struct{}{}
	pd.ctx.mu.Unlock()
	return mr, nil
}

// findProcessMR returns the octets [addr, addr+n) of a process-memory MR of
// c that holds them, or nil.
func (c *Context) findProcessMR(addr, n uint64) []byte {
	c.mu.Lock()
	defer c.mu.Unlock()
	for mr := range c.mrs {
		if !mr.process || mr.closed.Load() {
			continue
		}
		if off, ok := within(addr, n, mr.addr, uint64(len(mr.mem))); ok {
			return mr.mem[off : off+n]
		}
	}
	return nil
}

// Process reports whether the region is process memory (not in a Buffer):
// see RegMR.
func (mr *MR) Process() bool { return mr.process }

// LKey returns the local key (for SGEs).
func (mr *MR) LKey() uint32 { return mr.lkey }

// RKey returns the remote key (STag) to give peers.
func (mr *MR) RKey() uint32 { return mr.rkey }

// Addr returns the registered address (remote peers use it with RKey).
func (mr *MR) Addr() uint64 { return mr.addr }

// Bytes returns the registered memory.
func (mr *MR) Bytes() []byte { return mr.mem }

// Access returns the access rights it was registered with.
func (mr *MR) Access() Access { return mr.access }

// Contains reports whether b lies inside the region.
func (mr *MR) Contains(b []byte) bool {
	_, ok := within(addrOf(b), uint64(len(b)), mr.addr, uint64(len(mr.mem)))
	return ok
}

// SGE returns the scatter/gather element naming b, which should lie inside
// the region (Contains). A b outside it is not checked here: the daemon
// fails the work request with a protection error, as verbs do.
func (mr *MR) SGE(b []byte) SGE {
	return SGE{Addr: addrOf(b), Length: uint32(len(b)), LKey: mr.lkey}
}

// Close deregisters the region (DeregMR). Idempotent.
func (mr *MR) Close() error {
	mr.closeMu.Lock()
	defer mr.closeMu.Unlock()
	if mr.closed.Load() {
		return nil
	}
	if err := mr.ctx.destroy(proto.OpDeregMR, mr.handle); err != nil {
		return err
	}
	mr.closed.Store(true)
	mr.ctx.mu.Lock()
	delete(mr.ctx.mrs, mr)
	mr.ctx.mu.Unlock()
	return nil
}

// AH is an address handle: the destination of a datagram QP's Send. It is
// the client's alone (ABI 2, as mlx5's UD address vector): CreateAH checks
// the address and asks the daemon nothing, PostSend copies the address
// vector into the SQE and the daemon validates it there. An AH costs a few
// dozen octets and no daemon state, however many peers there are.
type AH struct {
	pd     *PD
	av     proto.AddressVector
	qkey   uint32 // the destination's Q_Key (0: every work request must name one)
	closed atomic.Bool
}

// CreateAHTo creates an address handle for the datagram QP e names (see
// QP.Endpoint on the remote side): its address and its Q_Key, which every
// Send through the handle carries unless the work request names another
// (SendWR.RemoteQKey).
func (pd *PD) CreateAHTo(e Endpoint) (*AH, error) {
	ah, err := pd.CreateAH(e.Addr)
	if err != nil {
		return nil, err
	}
	ah.qkey = e.QKey
	return ah, nil
}

// CreateAH creates an address handle for the datagram QP at addr (see
// QP.Addr on the remote side), or for a multicast group
// (docs/multicast.md), with no Q_Key: every work request through it must
// name the destination's (SendWR.RemoteQKey); CreateAHTo takes both.
// addr must be of the device's address family (EINVAL); an IPv4-mapped
// IPv6 address is the IPv4 address.
func (pd *PD) CreateAH(addr netip.AddrPort) (*AH, error) {
	const op = "create-ah"
	if err := pd.check(op); err != nil {
		return nil, err
	}
	if err := pd.ctx.Err(); err != nil {
		return nil, err
	}
	av := proto.AddressVectorOf(addr)
	if _, err := av.AddrPort(); err != nil {
		return nil, newError(op, unix.EINVAL, "address %v: want ip:port (%v)", addr, err)
	}
	if dev := pd.ctx.deviceAddr; dev.IsValid() && (av.Family == proto.AVFamilyIPv4) != dev.Is4() {
		return nil, newError(op, unix.EINVAL, "%v is not of the device's address family (%v)", addr, dev)
	}
	return &AH{pd: pd, av: av}, nil
}

// Addr returns the destination (an IPv4-mapped address unmapped).
func (ah *AH) Addr() netip.AddrPort {
	a, _ := ah.av.AddrPort() // validated by CreateAH
	return a
}

// QKey returns the destination's Q_Key the handle carries (0: none).
func (ah *AH) QKey() uint32 { return ah.qkey }

func (ah *AH) String() string { return fmt.Sprintf("ah(%v)", ah.Addr()) }

// Close destroys the address handle: PostSend refuses it from now on.
// Idempotent; nothing to ask of the daemon.
func (ah *AH) Close() error {
	ah.closed.Store(true)
	return nil
}

// usable reports whether a work request of a QP of pd may name ah.
func (ah *AH) usable(pd *PD) error {
	switch {
	case ah.closed.Load() || ah.pd.closed.Load():
		return closedError("post-send", "address handle")
	case ah.pd != pd:
		return newError("post-send", unix.EINVAL, "%v belongs to another protection domain than the QP's", ah)
	}
	return nil
}
