package verbsd

import (
	"errors"
	"fmt"
	"net"
	"os"
	"sort"
	"sync"

	"github.com/iwarpd/iwarpd/proto"
	"github.com/iwarpd/iwarpd/verbsd/config"
	"github.com/iwarpd/iwarpd/verbsd/rc"
	"github.com/iwarpd/iwarpd/verbsd/rd"
	"github.com/iwarpd/iwarpd/verbsd/rnic"
	"github.com/iwarpd/iwarpd/verbsd/ud"
)

// Server is the verbs service: it accepts control connections (one session
// each) and runs the engine. Start one with NewServer, hand it listeners
// with Serve, stop it with Close.
type Server struct {
	cfg     config.Config
	log     config.Logger
	eng     *rnic.Engine // engine 0: control commands go through it (rnic/engines.go)
	dev     *rnic.Device
	reserve *fdReserve // accept.go

	mu        sync.Mutex
	closed    bool
	listeners map[*net.UnixListener]struct{}
	sessions  map[*session]struct{}
	wg        sync.WaitGroup
}

// NewServer validates cfg and starts the engine.
func NewServer(cfg config.Config) (*Server, error) {
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("verbsd: configuration: %w", err)
	}
	// Without the hole guard, registered octets can become daemon memory:
	// the default registered share falls back (config/machine.go).
	_, guardErr := rnic.HoleGuard() // rnic/holeguard.go
	lowered := guardErr != nil && cfg.Unguarded(config.MemTotal())
	s := &Server{cfg: cfg, log: cfg.Log, listeners: map[*net.UnixListener]struct{}{}, sessions: map[*session]struct{}{},
		reserve: newFDReserve()}
	if s.log == nil {
		s.log = config.NopLogger{}
	}
	dev, err := rnic.NewDevice(&s.cfg) // rnic/engines.go
	if err != nil {
		s.reserve.close()
		return nil, err
	}
	s.dev, s.eng = dev, dev.Engs[0]
	dev.Log, dev.UnprivStart = s.log, rnic.UnprivilegedPortStart() // rnic/bind.go
	for _, e := range dev.Engs {
		attachTransports(e) // ud/qp.go
	}
	if n := len(dev.Engs); n > 1 && len(rnic.AllowedCPUs()) < n {
		s.log.Warnf("%d engines on %d CPUs: engines share CPUs and compete for them; use -engines %d or fewer for one engine per CPU",
			n, len(rnic.AllowedCPUs()), len(rnic.AllowedCPUs()))
	}
	if how, err := rnic.HoleGuard(); err != nil {
		fallback := ""
		if lowered {
			fallback = fmt.Sprintf(" (%d, M/2: the default of 2M is for a guarded daemon)", s.cfg.UserLimits.Registered)
		}
		s.log.Warnf("client memory is not guarded against holes punched after registration (%v): a client can make "+
			"the daemon allocate pages of its registered memory, charged to the daemon, up to user-max-registered-bytes%s; "+
			"run the daemon as root or give it access to /dev/userfaultfd (docs/security.md)", err, fallback)
	} else {
		s.log.Infof("client memory guarded against holes (%s): the daemon never allocates a client's page", how)
	}
	s.log.Infof("memory limits for MemTotal %d octets (%s): %s", config.MemTotal(), config.MachineRule, s.cfg.LimitsSummary())
	dev.Run()
	return s, nil
}

// Config returns the server's configuration.
func (s *Server) Config() config.Config { return s.cfg }

// Listen creates a SOCK_SEQPACKET control socket at path (which must not
// exist); cmd/iwarpd makes its own with permissions and stale-socket
// handling.
func Listen(path string) (*net.UnixListener, error) {
	return net.ListenUnix("unixpacket", &net.UnixAddr{Name: path, Net: "unixpacket"})
}

// Serve accepts control connections on l until l is closed or the server
// is closed. It returns nil then.
func (s *Server) Serve(l *net.UnixListener) error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return errors.New("verbsd: server closed")
	}
	s.listeners[l] = struct{}{}
	s.mu.Unlock()
	defer func() {
		s.mu.Lock()
		delete(s.listeners, l)
		s.mu.Unlock()
	}()
	var th acceptThrottle
	for {
		uc, err := l.AcceptUnix()
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return nil
			}
			s.acceptFailed(l, &th, err) // accept.go: reserve, backoff, rate-limited log
			continue
		}
		th.delay = 0
		s.mu.Lock()
		if s.closed {
			s.mu.Unlock()
			uc.Close()
			return nil
		}
		sess := newSessionOf(s, rnic.NewSession(s.dev, uc))                     // session_serve.go
		sess.PrivBind = sess.Cred.Uid == 0 || rnic.MayBindPrivileged(sess.Cred) // rnic/bind.go
		s.sessions[sess] = struct{}{}
		s.wg.Add(1)
		s.mu.Unlock()
		go func() {
			defer s.wg.Done()
			sess.serve()
			s.mu.Lock()
			delete(s.sessions, sess)
			s.mu.Unlock()
		}()
	}
}

// Close stops the service: listeners are closed, every session gets
// EventDeviceFatal and is closed (its resources reclaimed), then the engine
// stops.
func (s *Server) Close() error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil
	}
	s.closed = true
	for l := range s.listeners {
		l.Close()
	}
	for sess := range s.sessions {
		sess.Shutdown()
	}
	s.mu.Unlock()
	s.wg.Wait()
	s.dev.Stop()
	s.dev.CloseResources()
	s.reserve.close()
	return nil
}

// Inspect returns the daemon's state (what OpInspect serves).
func (s *Server) Inspect() (proto.Inspect, error) {
	var in proto.Inspect
	err := s.eng.Do(func() error {
		in = inspectAll(s.dev)
		return nil
	})
	in.Daemon = s.cfg.Version
	in.PID = os.Getpid()
	in.Device = s.cfg.DeviceAttr()
	in.Port = s.cfg.PortAttr()
	return in, err
}

// Device is the software RNIC the server runs: its engines (Engs; a
// command runs on Engs[0] through Do), sessions and configuration. For
// inspection and tests; the engines own what it holds (rnic/engines.go).
func (s *Server) Device() *rnic.Device { return s.dev }

// attachTransports gives a core engine its transports' per-engine state
// (found again with rnic.ExtOf): the datagram engine (UD), RD's on top of
// it, RC's.
func attachTransports(c *rnic.Engine) {
	e := ud.NewEngine(c)
	c.Ext = append(c.Ext, e, &rd.Engine{Engine: e}, rc.NewEngine(c))
}

// inspectAll is the daemon's state across engines. Runs inside a command.
func inspectAll(d *rnic.Device) proto.Inspect {
	in := engineInspect(d.Engs[0])
	for _, e := range d.Engs[1:] {
		for i, v := range e.Stats {
			if v != 0 {
				in.Counters[rnic.CounterNames[i]] += v
			}
		}
		in.Counters["qps"] += int64(len(e.QPs))
		extInspect(e, in.Counters)
	}
	for _, e := range d.Engs {
		in.Engines = append(in.Engines, e.EngineInfo())
	}
	return in
}

// engineInspect runs on the engine.
func engineInspect(e *rnic.Engine) proto.Inspect {
	in := proto.Inspect{Counters: e.Stats.Snapshot(), Sessions: []proto.SessionInfo{}}
	in.Counters["sessions"] = int64(len(e.Sessions))
	in.Counters["qps"] = int64(len(e.QPs))
	in.Counters["engine_epoch"] = int64(e.Epoch.Load())
	extInspect(e, in.Counters)
	for _, s := range e.Sessions {
		in.Sessions = append(in.Sessions, sessionInfo(s))
	}
	sort.Slice(in.Sessions, func(i, j int) bool { return in.Sessions[i].ID < in.Sessions[j].ID })
	return in
}

// extInspect adds to m what the transports hold of the daemon's counters
// on engine e (RD state, UD socket drops).
func extInspect(e *rnic.Engine, m map[string]int64) {
	for _, x := range e.Ext {
		x.Inspect(m)
	}
}

func sortedKeys[V any](m map[uint32]V) []uint32 {
	keys := make([]uint32, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(i, j int) bool { return keys[i] < keys[j] })
	return keys
}

// sessionInfo runs on the engine.
func sessionInfo(s *rnic.Session) proto.SessionInfo {
	si := proto.SessionInfo{ID: s.ID, PID: s.Cred.Pid, UID: s.Cred.Uid, GID: s.Cred.Gid, Client: s.Client,
		PDs: len(s.PDs), SRQs: len(s.SRQs), RegBytes: s.RegBytes, EventsDropped: s.EventsDropped.Load(),
		MRs: []proto.MRInfo{}, CQs: []proto.CQInfo{}, QPs: []proto.QPInfo{}}
	for _, h := range sortedKeys(s.MRs) {
		m := s.MRs[h]
		si.MRs = append(si.MRs, proto.MRInfo{Handle: h, LKey: m.LKey, RKey: m.RKey, Length: m.Size(), Access: m.Access})
	}
	for _, h := range sortedKeys(s.CQs) {
		c := s.CQs[h]
		si.CQs = append(si.CQs, proto.CQInfo{Handle: h, Depth: c.Depth, Armed: c.Ring.Arm().Load() != proto.ArmNone})
	}
	for _, h := range sortedKeys(s.QPs) {
		q := s.QPs[h]
		t := transportOf(q)
		qi := proto.QPInfo{Handle: h, QPN: q.QPN, Type: q.Type.String(), State: q.State.String(),
			Addr: addrString(t), Counters: q.Stats.Snapshot(), Engine: q.Eng.ID, ClientSocket: q.ClientSock,
			Fastpath: q.FastpathOwner()}
		t.Inspect(qi.Counters) // the transport's own state
		si.QPs = append(si.QPs, qi)
	}
	return si
}

// SessionCount is the number of client sessions the server holds (those
// whose connection is open or whose teardown has not finished).
func (s *Server) SessionCount() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.sessions)
}
