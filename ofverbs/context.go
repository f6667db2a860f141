package ofverbs

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/iwarpd/iwarpd/internal/eventfd"
	"github.com/iwarpd/iwarpd/internal/shm"
	"github.com/iwarpd/iwarpd/internal/sockdir"
	"github.com/iwarpd/iwarpd/proto"
	"golang.org/x/sys/unix"
)

// EnvSocket names the environment variable that overrides the default
// control socket path (the daemon reads the same variable).
const EnvSocket = "IWARPD_SOCKET"

// DefaultSocket returns the control socket a client uses when WithSocket is
// not given: $IWARPD_SOCKET if set, else the daemon's own default
// (/run/iwarpd/iwarpd.sock as root, else $XDG_RUNTIME_DIR/iwarpd/iwarpd.sock,
// or $TMPDIR/iwarpd-UID/iwarpd.sock when XDG_RUNTIME_DIR is unset).
func DefaultSocket() string {
	if s := os.Getenv(EnvSocket); s != "" {
		return s
	}
	if os.Geteuid() == 0 {
		return "/run/iwarpd/iwarpd.sock"
	}
	if dir := os.Getenv("XDG_RUNTIME_DIR"); dir != "" {
		return filepath.Join(dir, "iwarpd", "iwarpd.sock")
	}
	return filepath.Join(os.TempDir(), fmt.Sprintf("iwarpd-%d", os.Geteuid()), "iwarpd.sock")
}

// Option configures Open and ListDevices.
type Option func(*options)

type options struct {
	socket    string
	client    string
	timeout   time.Duration
	daemonUID int // also trusted besides root and ourselves; -1: none
	memFD     int // WithProcessMemFD; -1: this process's /proc/self/mem
	// daemonSockets: the daemon makes the QPs' sockets (qpsock.go).
	daemonSockets bool
}

// EnvDaemonUID names the environment variable that makes a client trust a
// daemon running as that uid (besides root and the client's own uid), for
// a daemon run under a service account.
const EnvDaemonUID = "IWARPD_DAEMON_UID"

// WithDaemonUID trusts a daemon (and a socket directory) owned by uid,
// besides root and the client's own uid (see Open).
func WithDaemonUID(uid int) Option { return func(o *options) { o.daemonUID = uid } }

// WithSocket connects to the daemon at path instead of DefaultSocket().
func WithSocket(path string) Option { return func(o *options) { o.socket = path } }

// WithClientName names this program to the daemon (shown by iwarpctl); the
// default is the executable's base name.
func WithClientName(name string) Option { return func(o *options) { o.client = name } }

// WithHelloTimeout bounds the wait for the daemon's answer to the opening
// handshake (default 10 s).
func WithHelloTimeout(d time.Duration) Option { return func(o *options) { o.timeout = d } }

// WithProcessMemFD hands fd, an open /proc/PID/mem of another process
// (which the caller could open only if it may ptrace that process: proc(5)),
// to the daemon at hello instead of this process's own /proc/self/mem: the
// session's process-memory MRs then name addresses of that address space
// (RegMR(b) takes b's address, so b must lie at the same address in this
// process; inline sends still copy this process's octets). For tools and
// tests; the Context sends a copy and does not close fd.
func WithProcessMemFD(fd int) Option { return func(o *options) { o.memFD = fd } }

func buildOptions(opts []Option) options {
	o := options{socket: DefaultSocket(), client: filepath.Base(os.Args[0]), timeout: 10 * time.Second, daemonUID: -1, memFD: -1}
	if v, err := strconv.Atoi(os.Getenv(EnvDaemonUID)); err == nil && v >= 0 {
		o.daemonUID = v
	}
	for _, f := range opts {
		f(&o)
	}
	return o
}

// Context is an open device: one session with the daemon. Every object
// (PD, MR, Buffer, CQ, CompChannel, QP, AH, SRQ) belongs to one Context, and
// closing the Context closes them all.
//
// Control verbs are serialized (one request in flight per Context). If the
// daemon dies or closes the session, every waiting and later control verb
// fails promptly with an *Error wrapping unix.ENODEV, Err reports it, a
// device-fatal AsyncEvent is delivered and blocked GetEvent calls return.
// Data-path verbs (PostSend, PostRecv, Poll) keep working on the shared rings,
// but nothing completes any more.
type Context struct {
	socket string
	hello  proto.HelloReply
	conn   *proto.Conn
	// deviceAddr is the device's address (hello): address handles must be
	// of its family. Invalid if the daemon did not say.
	deviceAddr netip.Addr
	// clientSockets: this process makes its UD and RD QPs' sockets
	// (qpsock.go).
	clientSockets bool

	callMu  sync.Mutex // one outstanding request
	seq     uint32
	replies chan reply
	done    chan struct{} // closed when the reader goroutine ends

	doorbell *eventfd.EventFD // engine doorbell (nil in inspect sessions)
	status   *shm.Region      // daemon status page, read-only
	asleep   *atomic.Uint32   // status page Asleep word
	wake     *eventfd.EventFD // signalled, never drained, when the session ends

	events    chan AsyncEvent // cap eventQueue+1: the last slot is kept for device-fatal
	fatalSent bool            // reader goroutine only
	dropped   atomic.Uint64

	mu       sync.Mutex
	end      *Error // why the session is over (nil while it is alive)
	closed   bool
	pds      map[*PD]struct{}
	mrs      map[*MR]struct{}
	buffers  map[*Buffer]struct{}
	channels map[*CompChannel]struct{}
	cqs      map[uint32]*CQ
	qps      map[uint32]*QP
	srqs     map[uint32]*SRQ

	cm cmState // connection manager (cm.go)
}

type reply struct {
	h    proto.Header
	body []byte
}

const eventQueue = 1024

// Open connects to the daemon and opens the device.
func Open(opts ...Option) (*Context, error) {
	return open(buildOptions(opts), false)
}

func open(o options, inspect bool) (*Context, error) {
	conn, hello, fds, err := handshake(o, inspect)
	if err != nil {
		return nil, err
	}
	c := &Context{
		socket: o.socket,
		hello:  hello,
		// An unparsable address leaves deviceAddr invalid: the daemon then
		// judges each destination alone (ud_dest.go).
		deviceAddr:    parseAddrOrZero(hello.Addr),
		clientSockets: !inspect && clientSockets(o, hello),
		conn:          conn,
		replies:       make(chan reply, 4),
		done:          make(chan struct{}),
		events:        make(chan AsyncEvent, eventQueue+1),
		pds:           map[*PD]struct{}{},
		mrs:           map[*MR]struct{}{},
		buffers:       map[*Buffer]struct{}{},
		channels:      map[*CompChannel]struct{}{},
		cqs:           map[uint32]*CQ{},
		qps:           map[uint32]*QP{},
		srqs:          map[uint32]*SRQ{},
	}
	fail := func(err error) (*Context, error) {
		closeFDs(fds)
		c.status.Close()
		c.doorbell.Close()
		c.wake.Close()
		conn.Close()
		return nil, err
	}
	if c.wake, err = eventfd.New(true); err != nil {
		return fail(&Error{Op: "open", Errno: errnoOf(err, unix.EMFILE), Msg: err.Error()})
	}
	if !inspect {
		if len(fds) != 2 {
			return fail(newError("open", unix.EPROTO, "hello reply carried %d descriptors, want 2 (doorbell, status page)", len(fds)))
		}
		if c.doorbell, err = eventfd.FromFD(fds[0]); err != nil {
			return fail(&Error{Op: "open", Errno: unix.EPROTO, Msg: err.Error()})
		}
		fds[0] = -1
		reg, err := shm.Map(fds[1], proto.StatusPageLen, unix.PROT_READ)
		fds[1] = -1 // shm.Map owns it now
		if err != nil {
			return fail(&Error{Op: "open", Errno: errnoOf(err, unix.EPROTO), Msg: "status page: " + err.Error()})
		}
		c.status = reg
		if m := binary.LittleEndian.Uint32(reg.Mem[proto.OffStatusMagic:]); m != proto.StatusMagic {
			return fail(newError("open", unix.EPROTO, "status page: bad magic %#x", m))
		}
		c.asleep = (*atomic.Uint32)(unsafe.Pointer(&reg.Mem[proto.OffStatusAsleep]))
	} else {
		closeFDs(fds)
	}
	go c.readLoop()
	return c, nil
}

// handshake dials the daemon and exchanges Hello, synchronously. Before it
// sends anything it checks whom it talks to (internal/sockdir): the socket's
// directory must belong to the user, root or WithDaemonUID's uid and be
// writable by no one else, and the daemon's SO_PEERCRED uid must be one of
// those too — an impostor daemon (a squatted $TMPDIR/iwarpd-UID) would
// otherwise receive the client's memory.
func handshake(o options, inspect bool) (*proto.Conn, proto.HelloReply, []int, error) {
	var hr proto.HelloReply
	if err := sockdir.Check(filepath.Dir(o.socket), os.Geteuid(), o.daemonUID); err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return nil, hr, nil, &Error{Op: "open", Errno: unix.ENODEV,
				Msg: fmt.Sprintf("no iwarpd answers at %s (%v); start iwarpd or set %s", o.socket, err, EnvSocket)}
		}
		return nil, hr, nil, &Error{Op: "open", Errno: unix.EACCES, Msg: err.Error()}
	}
	conn, err := proto.Dial(o.socket)
	if err != nil {
		return nil, hr, nil, &Error{Op: "open", Errno: errnoOf(err, unix.ENODEV),
			Msg: fmt.Sprintf("no iwarpd answers at %s (%v); start iwarpd or set %s", o.socket, err, EnvSocket)}
	}
	if uid, err := sockdir.PeerUID(conn.UnixConn()); err != nil || !sockdir.TrustedPeer(uid, o.daemonUID) {
		conn.Close()
		if err != nil {
			return nil, hr, nil, &Error{Op: "open", Errno: unix.EACCES, Msg: fmt.Sprintf("%s: %v", o.socket, err)}
		}
		return nil, hr, nil, newError("open", unix.EACCES, "the process serving %s runs as uid %d, not as root or uid %d: not an iwarpd to trust with memory (if it is, set %s=%d)",
			o.socket, uid, os.Geteuid(), EnvDaemonUID, uid)
	}
	fail := func(fds []int, err error) (*proto.Conn, proto.HelloReply, []int, error) {
		closeFDs(fds)
		conn.Close()
		return nil, hr, nil, err
	}
	req := proto.HelloRequest{ABI: proto.ABIVersion, Client: o.client, Inspect: inspect}
	var sendFDs []int
	if !inspect {
		// The address space the session's process-memory MRs refer to:
		// this process's own, opened by itself (docs/memory-registration.md).
		// Without /proc the session works, and process-memory
		// registrations fail with a message saying why.
		if o.memFD >= 0 {
			req.ProcessMem = true
			sendFDs = append(sendFDs, o.memFD)
		} else if fd, err := unix.Open("/proc/self/mem", unix.O_RDWR|unix.O_CLOEXEC, 0); err == nil {
			defer unix.Close(fd)
			req.ProcessMem = true
			sendFDs = append(sendFDs, fd)
		}
	}
	if err := conn.Send(proto.Header{Version: proto.ABIVersion, Op: proto.OpHello, Seq: 1}, req, sendFDs...); err != nil {
		return fail(nil, &Error{Op: "hello", Errno: errnoOf(err, unix.ENODEV), Msg: err.Error()})
	}
	if o.timeout > 0 {
		conn.UnixConn().SetReadDeadline(time.Now().Add(o.timeout))
	}
	for {
		h, body, fds, err := conn.Receive()
		if err != nil {
			closeFDs(fds)
			if errors.Is(err, proto.ErrFDsLost) {
				return fail(nil, newError("hello", unix.EMFILE, "the daemon's answer arrived without its descriptors: this process is out of file descriptors (%v)", err))
			}
			if errors.Is(err, proto.ErrTooLarge) || errors.Is(err, proto.ErrBadMagic) || errors.Is(err, proto.ErrShortMessage) {
				return fail(nil, &Error{Op: "hello", Errno: unix.EPROTO, Msg: err.Error()})
			}
			if errors.Is(err, os.ErrDeadlineExceeded) {
				return fail(nil, newError("hello", unix.ETIMEDOUT, "iwarpd at %s did not answer within %v", o.socket, o.timeout))
			}
			return fail(nil, newError("hello", unix.ENODEV, "%s (%v)", msgDaemonGone, err))
		}
		if h.Op == proto.OpEvent {
			closeFDs(fds)
			continue
		}
		if h.Version != proto.ABIVersion {
			verr := &proto.VersionError{Local: proto.ABIVersion, Peer: h.Version, Side: "client"}
			return fail(fds, fmt.Errorf("ofverbs: hello: %w: %w (daemon says: %s)", verr, unix.EPROTO, errorText(body)))
		}
		if h.Op != proto.OpHello|proto.OpReply || h.Seq != 1 {
			return fail(fds, newError("hello", unix.EPROTO, "daemon answered %v seq %d", h.Op, h.Seq))
		}
		if h.Status != 0 {
			return fail(fds, &Error{Op: "hello", Errno: h.Status, Msg: errorText(body)})
		}
		if err := json.Unmarshal(body, &hr); err != nil {
			return fail(fds, newError("hello", unix.EPROTO, "decoding reply: %v", err))
		}
		if hr.ABI != proto.ABIVersion {
			verr := &proto.VersionError{Local: proto.ABIVersion, Peer: hr.ABI, Side: "client"}
			return fail(fds, fmt.Errorf("ofverbs: hello: %w: %w", verr, unix.EPROTO))
		}
		conn.UnixConn().SetReadDeadline(time.Time{})
		return conn, hr, fds, nil
	}
}

func errorText(body []byte) string {
	var eb proto.ErrorBody
	if json.Unmarshal(body, &eb) == nil && eb.Error != "" {
		return eb.Error
	}
	return string(bytes.TrimSpace(body))
}

func closeFDs(fds []int) {
	for _, fd := range fds {
		if fd >= 0 {
			unix.Close(fd)
		}
	}
}

// readLoop is the Context's single reader: replies go to the waiting caller,
// events to the async queue. It ends with the connection.
func (c *Context) readLoop() {
	defer close(c.done)
	defer close(c.events)
	for {
		h, body, fds, err := c.conn.Receive()
		closeFDs(fds) // no reply after Hello carries descriptors
		if err != nil {
			if errors.Is(err, proto.ErrTooLarge) || errors.Is(err, proto.ErrBadMagic) || errors.Is(err, proto.ErrShortMessage) ||
				errors.Is(err, proto.ErrFDsLost) {
				continue // a message we cannot read; its caller is not answered, but the session goes on
			}
			c.endSession()
			return
		}
		if h.Op == proto.OpEvent {
			c.dispatchEvent(body)
			continue
		}
		if h.Op == proto.OpCMEvent {
			c.dispatchCMEvent(body)
			continue
		}
		r := reply{h: h, body: bytes.Clone(body)}
		select {
		case c.replies <- r:
		default: // nobody waits for this (a stray reply): drop it
		}
	}
}

// endSession records that the daemon side is gone, tells the application
// (device-fatal event) and wakes GetEvent waiters.
func (c *Context) endSession() {
	c.mu.Lock()
	fatal := c.end == nil
	if fatal {
		c.end = &Error{Op: "session", Errno: unix.ENODEV, Msg: msgDaemonGone}
	}
	c.mu.Unlock()
	if fatal && !c.fatalSent {
		c.fatalSent = true
		select {
		case c.events <- AsyncEvent{Type: EventDeviceFatal, Detail: msgDaemonGone}:
		default:
			c.dropped.Add(1)
		}
	}
	c.wake.Signal()
}

func (c *Context) dispatchEvent(body []byte) {
	var ev proto.Event
	if err := json.Unmarshal(body, &ev); err != nil {
		c.dropped.Add(1)
		return
	}
	ae := AsyncEvent{Type: ev.Type, Handle: ev.Handle, Detail: ev.Detail}
	c.mu.Lock()
	switch ev.Type {
	case EventQPFatal, EventQPAccessError, EventRemoteAccessRefused:
		ae.QP = c.qps[ev.Handle]
	case EventCQError:
		ae.CQ = c.cqs[ev.Handle]
	case EventSRQLimit:
		ae.SRQ = c.srqs[ev.Handle]
	}
	c.mu.Unlock()
	if ev.Type == EventDeviceFatal {
		if c.fatalSent {
			return
		}
		c.fatalSent = true
		select {
		case c.events <- ae: // may take the reserved slot
		default:
			c.dropped.Add(1)
		}
		return
	}
	if len(c.events) < cap(c.events)-1 { // only this goroutine sends
		c.events <- ae
	} else {
		c.dropped.Add(1)
	}
}

// sessionErr returns the error of a verb op on a session that is over, or nil.
func (c *Context) sessionErr(op string) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.end == nil {
		return nil
	}
	return &Error{Op: op, Errno: c.end.Errno, Msg: c.end.Msg}
}

// call sends one request and waits for its reply, decoding it into resp
// (which may be nil). fds travel with the request and stay open here.
func (c *Context) call(op proto.Op, req, resp any, fds ...int) error {
	name := op.String()
	c.callMu.Lock()
	defer c.callMu.Unlock()
	if err := c.sessionErr(name); err != nil {
		return err
	}
	c.seq++
	seq := c.seq
	if err := c.conn.Send(proto.Header{Version: proto.ABIVersion, Op: op, Seq: seq}, req, fds...); err != nil {
		if serr := c.sessionErr(name); serr != nil {
			return serr
		}
		errno := errnoOf(err, unix.EIO)
		if errors.Is(err, net.ErrClosed) {
			errno = unix.EBADF
		}
		switch errno {
		case unix.EPIPE, unix.ECONNRESET, unix.ENOTCONN, unix.EBADF:
			return &Error{Op: name, Errno: unix.ENODEV, Msg: msgDaemonGone}
		}
		return &Error{Op: name, Errno: errno, Msg: err.Error()}
	}
	for {
		select {
		case r := <-c.replies:
			if r.h.Seq != seq || r.h.Op != op|proto.OpReply {
				continue // stray
			}
			return decodeReply(name, r, resp)
		case <-c.done:
			select { // a reply queued before the reader stopped still counts
			case r := <-c.replies:
				if r.h.Seq == seq && r.h.Op == op|proto.OpReply {
					return decodeReply(name, r, resp)
				}
			default:
			}
			if err := c.sessionErr(name); err != nil {
				return err
			}
			return &Error{Op: name, Errno: unix.ENODEV, Msg: msgDaemonGone}
		}
	}
}

func decodeReply(op string, r reply, resp any) error {
	if r.h.Version != proto.ABIVersion {
		verr := &proto.VersionError{Local: proto.ABIVersion, Peer: r.h.Version, Side: "client"}
		return fmt.Errorf("ofverbs: %s: %w: %w", op, verr, unix.EPROTO)
	}
	if r.h.Status != 0 {
		return &Error{Op: op, Errno: r.h.Status, Msg: errorText(r.body)}
	}
	if resp != nil && len(r.body) > 0 {
		if err := json.Unmarshal(r.body, resp); err != nil {
			return newError(op, unix.EPROTO, "decoding reply: %v", err)
		}
	}
	return nil
}

// ringDoorbell wakes the engine if it said it sleeps. Callers have just
// published ring entries (a sequentially consistent store): with the
// engine's store-Asleep-then-rescan this cannot lose a wake-up.
func (c *Context) ringDoorbell() {
	if c.asleep != nil && c.asleep.Load() == 1 {
		c.doorbell.Signal()
	}
}

// Err returns nil while the session is alive, else why it ended: an *Error
// wrapping unix.ENODEV (daemon gone, or Close called).
func (c *Context) Err() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.end == nil {
		return nil
	}
	return c.end
}

// AsyncEvents returns the queue of asynchronous events. It is closed when
// the session ends (after a final EventDeviceFatal if the daemon went away).
// Events beyond 1024 unread ones are dropped and counted (DroppedEvents).
func (c *Context) AsyncEvents() <-chan AsyncEvent { return c.events }

// DroppedEvents returns how many asynchronous events were lost because the
// queue was full (or could not be decoded).
func (c *Context) DroppedEvents() uint64 { return c.dropped.Load() }

// Socket returns the control socket path.
func (c *Context) Socket() string { return c.socket }

// DeviceName returns the name the daemon gave its device.
func (c *Context) DeviceName() string { return c.hello.Device }

// DaemonVersion returns the daemon's version string.
func (c *Context) DaemonVersion() string { return c.hello.Daemon }

// SessionID returns the daemon's number for this session.
func (c *Context) SessionID() uint64 { return c.hello.SessionID }

// QueryDevice returns the device's limits.
func (c *Context) QueryDevice() (DeviceAttr, error) {
	var a DeviceAttr
	err := c.call(proto.OpQueryDevice, nil, &a)
	return a, err
}

// QueryPort returns the port's state and addresses.
func (c *Context) QueryPort() (PortAttr, error) {
	var a PortAttr
	err := c.call(proto.OpQueryPort, nil, &a)
	return a, err
}

// destroy asks the daemon to destroy an object. On a session that is over
// there is nothing to destroy: the daemon dropped everything.
func (c *Context) destroy(op proto.Op, handle uint32) error {
	err := c.call(op, proto.Handle{Handle: handle}, nil)
	if err != nil && c.Err() != nil {
		return nil
	}
	return err
}

// closedError is the error of a verb on a closed object.
func closedError(op, what string) error {
	return newError(op, unix.EINVAL, "%s is closed", what)
}

// Close ends the session and releases every object of the Context (without
// asking the daemon to destroy them one by one: ending the session does).
// Memory of Buffers and rings is unmapped: slices from Buffer.Bytes must not
// be used afterwards. Close is idempotent.
func (c *Context) Close() error {
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return nil
	}
	c.closed = true
	if c.end == nil {
		c.end = &Error{Op: "session", Errno: unix.ENODEV, Msg: msgClosed}
	}
	c.mu.Unlock()
	err := c.conn.Close()
	<-c.done
	c.wake.Signal()

	c.mu.Lock()
	channels, cqs, qps, srqs := c.channels, c.cqs, c.qps, c.srqs
	mrs, pds, buffers := c.mrs, c.pds, c.buffers
	c.channels, c.cqs, c.qps, c.srqs = map[*CompChannel]struct{}{}, map[uint32]*CQ{}, map[uint32]*QP{}, map[uint32]*SRQ{}
	c.mrs, c.pds, c.buffers = map[*MR]struct{}{}, map[*PD]struct{}{}, map[*Buffer]struct{}{}
	c.mu.Unlock()
	for _, q := range qps {
		q.release()
	}
	for _, s := range srqs {
		s.release()
	}
	for _, cq := range cqs {
		cq.release()
	}
	for ch := range channels {
		ch.release()
	}
	for mr := range mrs {
		mr.closed.Store(true)
	}
	for pd := range pds {
		pd.closed.Store(true)
	}
	// AHs need nothing: one whose PD is closed is refused (AH.usable).
	for b := range buffers {
		b.release()
	}
	c.status.Close()
	c.doorbell.Close()
	c.wake.Close()
	if err != nil {
		return &Error{Op: "close", Errno: errnoOf(err, unix.EIO), Msg: err.Error()}
	}
	return nil
}

// parseAddrOrZero parses an IP address; "" or garbage give the zero Addr.
func parseAddrOrZero(s string) netip.Addr {
	a, err := netip.ParseAddr(s)
	if err != nil {
		return netip.Addr{}
	}
	return a.Unmap()
}
