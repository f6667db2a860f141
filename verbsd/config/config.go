package config

import (
	"errors"
	"fmt"
	"net/netip"
	"time"

	"github.com/iwarpd/iwarpd/llp/dgram"
	"github.com/iwarpd/iwarpd/proto"
)

// Limits are the per-session limits the daemon enforces, reported to
// clients by QueryDevice (proto.DeviceAttr). One client cannot exhaust the
// daemon for the others: every object count, queue depth and the total of
// registered bytes is bounded per session.
type Limits struct {
	MaxQP          int    // queue pairs per session
	MaxCQ          int    // completion queues per session
	MaxMR          int    // memory regions per session
	MaxPD          int    // protection domains per session
	MaxSRQ         int    // shared receive queues per session
	MaxCompChannel int    // completion channels per session
	MaxListeners   int    // RC listeners (TCP listening sockets) per session
	MaxRegistered  uint64 // registered bytes per session
	MaxMRSize      uint64 // largest single memory region
	MaxQPWR        int    // SQ/RQ depth
	MaxSRQWR       int    // SRQ depth
	MaxCQE         int    // CQ depth
	MaxSGE         int    // SGEs per work request
	MaxInline      int    // inline octets per send
}

// Config is everything the engine and the sessions are told. It is passed to
// NewServer and never changes afterwards.
type Config struct {
	// Device is the device name clients see ("iwarpd0").
	Device string
	// Version is the daemon's version string (Hello reply, Inspect).
	Version string
	// Addr is the IP address datagram QPs bind to.
	Addr netip.Addr
	// UDPorts is the UDP port range of UD QPs; RDPorts is reserved for RD.
	UDPorts, RDPorts dgram.PortRange
	// ListenPorts is the TCP port range RC listeners may ask for (port 0,
	// an ephemeral port, is always allowed). Ports below the kernel's
	// ip_unprivileged_port_start are granted only to clients that could
	// bind them themselves (rnic/bind.go).
	ListenPorts dgram.PortRange
	// DatagramSize is the largest UDP payload the daemon sends (segments
	// larger messages with DDP); up to dgram.MaxDatagramSize.
	DatagramSize int
	// MaxMsgUD is the largest UD message (several datagrams).
	MaxMsgUD int
	// ReassemblyTimeout drops a partly received multi-datagram message.
	ReassemblyTimeout time.Duration
	// MaxPartial bounds partly reassembled messages per QP.
	MaxPartial int
	// PollWindow is how long the engine keeps polling (yielding the CPU
	// between empty passes) before it sleeps on epoll.
	PollWindow time.Duration
	// Idle is how the engine gives its CPU away after a pass that
	// completed work and between empty passes of the poll window
	// (rnic/idle.go): IdleAdaptive (yield until the CPU is seen contended,
	// then sleep IdleSleep) or IdleYield (sched_yield always).
	Idle IdleMode
	// IdleSleep is one sleep of IdleAdaptive (1ns..1ms).
	IdleSleep time.Duration
	// FastpathLease is how long a rank that reads its QP's socket itself
	// (a fast-path page, proto/fastpath.go) keeps it without renewing its
	// lease before the engine takes it over (docs/fastpath.md). 0 means
	// DefaultFastpathLease.
	FastpathLease time.Duration
	// ProcMemStallTimeout bounds how long an engine (or a request) waits
	// for one access to a client's process memory (rnic/copier.go): past
	// it the access fails, the session is marked stalled and its user gets
	// a strike (docs/memory-registration.md "A page that does not come").
	// 0 means DefaultProcMemStallTimeout.
	ProcMemStallTimeout time.Duration
	// Engines is how many engines serve the device (docs/engines.md): each
	// a thread pinned to a CPU, owning the QPs placed on it. 0 means 1.
	Engines int
	// PollBatch is the most work requests (and datagrams) served per QP per
	// engine pass, so that no QP starves another.
	PollBatch int
	// SocketBuffer is SO_SNDBUF/SO_RCVBUF of datagram sockets (0: kernel
	// default). The receive buffer is a UD QP's receive backlog
	// (ud/backlog.go), forced (SO_RCVBUFFORCE) where the daemon may.
	SocketBuffer int
	// GSO lets one sendmmsg message carry several datagrams of one
	// destination, cut apart by the kernel (UDP_SEGMENT); a socket whose
	// kernel or route refuses falls back to one datagram per message.
	GSO bool
	// GRO asks the kernel to hand over datagrams of one flow coalesced
	// (UDP_GRO); the engine takes them apart.
	GRO bool
	// RCHoldMsgs and RCHoldBytes bound, per RC QP created with hold_recv
	// (proto.CreateQPRequest.HoldRecv), the untagged messages (Sends, and
	// Immediate Data that take a receive) the daemon keeps when they
	// arrive before a receive is posted, and their octets (rc/hold.go).
	// Past either bound the QP is terminated as RFC 5040 does without
	// the option. 0 holds nothing.
	RCHoldMsgs  int
	RCHoldBytes int
	Limits      Limits
	// UserLimits bound each Unix user's sessions together (rnic/userlimits.go).
	UserLimits UserLimits
	// MPA is the device's policy for RC connection establishment (rc/cm_config.go;
	// the zero value is the RFC-conforming default).
	MPA MPAConfig
	// Mcast is the UD multicast policy (config/mcast.go; the zero value:
	// the interface of Addr, TTL 1, loopback on).
	Mcast McastConfig
	// RD is the reliable-datagram policy (rd/state.go).
	RD RDConfig
	// Log receives the daemon's few log lines (session open/close, errors
	// of control requests). Nil: discard. Never called per packet.
	Log Logger
}

// Logger is the logging adapter cmd/iwarpd passes in (logrus there).
type Logger interface {
	Infof(format string, args ...any)
	Warnf(format string, args ...any)
	Debugf(format string, args ...any)
}

type NopLogger struct{}

func (NopLogger) Infof(string, ...any)  {}
func (NopLogger) Warnf(string, ...any)  {}
func (NopLogger) Debugf(string, ...any) {}

// DefaultLimits are generous where that is cheap (60 SGEs, as ARMCI-style
// noncontiguous transfers need).
var DefaultLimits = Limits{
	MaxQP:          256,
	MaxCQ:          256,
	MaxMR:          4096,
	MaxPD:          64,
	MaxSRQ:         64,
	MaxCompChannel: 64,
	MaxListeners:   64,
	MaxRegistered:  4 << 30,
	MaxMRSize:      4 << 30,
	MaxQPWR:        16384,
	MaxSRQWR:       16384,
	MaxCQE:         65536,
	MaxSGE:         60,
	MaxInline:      256,
}

// DefaultListenPorts are the TCP ports RC listeners may use by default: the
// unprivileged ones.
var DefaultListenPorts = dgram.PortRange{First: 1024, Last: 65535}

// DefaultConfig returns the defaults of a single-host device on 127.0.0.1.
func DefaultConfig() Config {
	c := Config{
		Device:            "iwarpd0",
		Version:           "dev",
		Addr:              netip.AddrFrom4([4]byte{127, 0, 0, 1}),
		UDPorts:           dgram.DefaultUDPorts,
		RDPorts:           dgram.DefaultRDPorts,
		ListenPorts:       DefaultListenPorts,
		DatagramSize:      dgram.DefaultDatagramSize,
		MaxMsgUD:          1 << 20,
		ReassemblyTimeout: 100 * time.Millisecond,
		MaxPartial:        16,
		PollWindow:        200 * time.Microsecond,
		Idle:              IdleAdaptive,
		IdleSleep:         time.Microsecond,
		FastpathLease:     DefaultFastpathLease,
		Engines:           1,
		PollBatch:         64,
		SocketBuffer:      4 << 20,
		GSO:               true,
		GRO:               true,
		RCHoldMsgs:        DefaultRCHoldMsgs,
		RCHoldBytes:       DefaultRCHoldBytes,
		RD:                DefaultRDConfig(),
		Limits:            DefaultLimits,
		UserLimits:        DefaultUserLimits,
	}
	c.FitToMachine(MemTotal()) // config/machine.go
	return c
}

// Defaults of RCHoldMsgs and RCHoldBytes: what a libfabric application
// may send ahead of its peer's receives, twice over — fabtests' fi_bw
// sends a window of 64 messages of up to 1 MiB before its peer posts one
// receive (issue 19), which the tcp provider's socket buffering and the
// verbs provider's RNR retry absorb. Memory is taken only while messages
// wait; UserLimits.Held bounds a user's QPs together.
const (
	DefaultRCHoldMsgs  = 256
	DefaultRCHoldBytes = 128 << 20
)

// minDatagramSize leaves room for a DDP untagged header, the CRC and some
// payload.
const minDatagramSize = 64

// DefaultFastpathLease is -fastpath-lease's default: the prototype's
// (docs/design-small-messages.md "Figures"), to be measured under load.
const DefaultFastpathLease = time.Millisecond

// Lease returns FastpathLease, or its default when 0.
func (c *Config) Lease() time.Duration {
	if c.FastpathLease <= 0 {
		return DefaultFastpathLease
	}
	return c.FastpathLease
}

// Validate reports the first unusable setting.
func (c *Config) Validate() error {
	var errs []error
	bad := func(format string, args ...any) { errs = append(errs, fmt.Errorf(format, args...)) }
	if !c.Addr.IsValid() {
		bad("address is not set")
	}
	if c.UDPorts.Len() == 0 || c.UDPorts.First == 0 {
		bad("UD port range %d-%d is empty", c.UDPorts.First, c.UDPorts.Last)
	}
	if c.RDPorts.Len() > 0 && c.UDPorts.Len() > 0 && c.RDPorts.First <= c.UDPorts.Last && c.UDPorts.First <= c.RDPorts.Last {
		bad("UD ports %d-%d and RD ports %d-%d overlap", c.UDPorts.First, c.UDPorts.Last, c.RDPorts.First, c.RDPorts.Last)
	}
	if c.DatagramSize < minDatagramSize || c.DatagramSize > dgram.MaxDatagramSize {
		bad("datagram size %d: want %d..%d", c.DatagramSize, minDatagramSize, dgram.MaxDatagramSize)
	}
	if c.MaxMsgUD < 0 || c.MaxMsgUD > 1<<30 {
		bad("max UD message %d: want 0..1GiB", c.MaxMsgUD)
	}
	if c.PollWindow < 0 {
		bad("poll window %v is negative", c.PollWindow)
	}
	if c.Idle != IdleAdaptive && c.Idle != IdleYield {
		bad("idle mode %d: want adaptive or yield", c.Idle)
	}
	if c.IdleSleep <= 0 || c.IdleSleep > time.Millisecond {
		bad("idle sleep %v: want 1ns..1ms", c.IdleSleep)
	}
	if c.FastpathLease < 0 || c.FastpathLease > 10*time.Second {
		bad("fast-path lease %v: want 0..10s (0: the default %v)", c.FastpathLease, DefaultFastpathLease)
	}
	if c.ProcMemStallTimeout < 0 || c.ProcMemStallTimeout > time.Minute {
		bad("process-memory stall timeout %v: want 0..1m (0: the default %v)", c.ProcMemStallTimeout, DefaultProcMemStallTimeout)
	}
	if c.Engines < 0 || c.Engines > MaxEngines {
		bad("engines %d: want 1..%d", c.Engines, MaxEngines)
	}
	if c.PollBatch < 1 || c.PollBatch > 1<<16 {
		bad("poll batch %d: want 1..65536", c.PollBatch)
	}
	if c.RCHoldMsgs < 0 || c.RCHoldMsgs > 1<<20 || c.RCHoldBytes < 0 || c.RCHoldBytes > 1<<30 {
		bad("rc-hold-msgs %d / rc-hold-bytes %d: want 0..1048576 messages and 0..1GiB", c.RCHoldMsgs, c.RCHoldBytes)
	}
	if c.MaxPartial < 1 || c.ReassemblyTimeout <= 0 {
		bad("reassembly: %d partial messages, timeout %v: both must be positive", c.MaxPartial, c.ReassemblyTimeout)
	}
	if err := c.Mcast.validate(); err != nil {
		errs = append(errs, err)
	}
	if err := c.RD.validate(); err != nil {
		errs = append(errs, err)
	}
	if err := c.UserLimits.validate(); err != nil {
		errs = append(errs, err)
	}
	l := c.Limits
	for _, v := range []struct {
		name string
		n    int
	}{{"max-qp", l.MaxQP}, {"max-cq", l.MaxCQ}, {"max-mr", l.MaxMR}, {"max-pd", l.MaxPD},
		{"max-srq", l.MaxSRQ}, {"max-comp-channel", l.MaxCompChannel}, {"max-listeners", l.MaxListeners}} {
		if v.n < 0 {
			bad("%s %d is negative", v.name, v.n)
		}
	}
	for _, v := range []struct {
		name string
		n    int
	}{{"max-qp-wr", l.MaxQPWR}, {"max-srq-wr", l.MaxSRQWR}, {"max-cqe", l.MaxCQE}} {
		if v.n < 1 || v.n > proto.MaxDepth {
			bad("%s %d: want 1..%d", v.name, v.n, proto.MaxDepth)
		}
	}
	if l.MaxSGE < 1 || l.MaxSGE > 1024 {
		bad("max-sge %d: want 1..1024", l.MaxSGE)
	}
	if l.MaxInline < 0 || l.MaxInline > 65536 {
		bad("max-inline %d: want 0..65536", l.MaxInline)
	}
	return errors.Join(errs...)
}

// DeviceAttr returns what QueryDevice reports.
func (c *Config) DeviceAttr() proto.DeviceAttr {
	l := c.Limits
	return proto.DeviceAttr{
		Name: c.Device, MaxQP: l.MaxQP, MaxQPWR: l.MaxQPWR, MaxSGE: l.MaxSGE, MaxCQ: l.MaxCQ, MaxCQE: l.MaxCQE,
		MaxMR: l.MaxMR, MaxMRSize: l.MaxMRSize, MaxRegistered: l.MaxRegistered, MaxPD: l.MaxPD,
		MaxSRQ: l.MaxSRQ, MaxSRQWR: l.MaxSRQWR, MaxInline: l.MaxInline, MaxMsgUD: c.MaxMsgUD,
		DatagramSize: c.DatagramSize, MaxCompChannel: l.MaxCompChannel,
		// Remote atomics use the CPU's atomic instructions on the shared
		// memory (rnic/semantics.go AtomicExecute).
		AtomicCap: proto.AtomicGlob, MaxQPRdAtom: MaxIRDORD, MaxQPInitRdAtom: MaxIRDORD,
	}
}

// PortAttr returns what QueryPort reports.
func (c *Config) PortAttr() proto.PortAttr {
	return proto.PortAttr{State: "active", Addr: c.Addr.String(), DatagramSize: c.DatagramSize,
		UDPorts: fmt.Sprintf("%d-%d", c.UDPorts.First, c.UDPorts.Last)}
}

// DefaultProcMemStallTimeout is what a ProcMemStallTimeout of 0 means: far
// above a copy from resident memory (a 1 MiB pread of /proc/PID/mem takes
// well under a millisecond) and above what a loaded machine adds to it (the
// copier or the whole daemon descheduled, the client holding its own
// mmap_lock: 50 ms failed a well-behaved MPI rank in CI), and below what
// stalls a peer's protocol. With 3 strikes per user and hour, one user can
// hold an engine at most 6 s an hour.
const DefaultProcMemStallTimeout = 2 * time.Second

// StallTimeout is ProcMemStallTimeout with 0 meaning the default.
func (c *Config) StallTimeout() time.Duration {
	if c.ProcMemStallTimeout > 0 {
		return c.ProcMemStallTimeout
	}
	return DefaultProcMemStallTimeout
}

// MaxEngines bounds Config.Engines.
const MaxEngines = 64
