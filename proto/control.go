package proto

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"net"

	"golang.org/x/sys/unix"
)

// HeaderLen is the size of a control message header.
const HeaderLen = 16

// Header opens every control message (little-endian):
//
//	0   Magic    u32  "IWRP"
//	4   Version  u16  ABIVersion
//	6   Op       u16  request op; a reply carries the op it answers | OpReply
//	8   Seq      u32  chosen by the client, echoed in the reply; 0 in events
//	12  Status   u32  replies: 0 or an errno; requests: 0
type Header struct {
	Version uint16
	Op      Op
	Seq     uint32
	Status  unix.Errno
}

// Op names a control request. A reply has OpReply set; an unsolicited
// daemon-to-client message is OpEvent.
type Op uint16

const (
	OpHello Op = iota + 1
	OpQueryDevice
	OpQueryPort
	OpAllocPD
	OpDeallocPD
	OpRegMR
	OpDeregMR
	OpCreateCompChannel
	OpDestroyCompChannel
	OpCreateCQ
	OpDestroyCQ
	OpCreateQP
	OpModifyQP
	OpQueryQP
	OpDestroyQP
	_ // 16: create-ah until ABI 2 (address handles are the client's)
	_ // 17: destroy-ah until ABI 2
	OpCreateSRQ
	OpDestroySRQ
	OpInspect // daemon state for iwarpctl
	OpListen
	OpCloseListener
	OpAccept
	OpReject
	OpConnect
	OpDisconnect
	OpAttachMcast  // McastRequest: attach a UD QP to an IPv4 multicast group (mcast.go)
	OpDetachMcast  // McastRequest: detach it
	OpReservePort  // ReservePortRequest: a port for a client-made datagram QP socket (ABI 5)
	OpFastpathPage // FastpathPageRequest: a UD QP's fast-path page (ABI 5, fastpath.go)
	opCount

	OpEvent   Op = 0x4000 // asynchronous event, daemon to client
	OpCMEvent Op = 0x4001 // connection manager event (CMEvent), daemon to client
	OpReply   Op = 0x8000 // set in replies
)

var opNames = [...]string{
	OpHello: "hello", OpQueryDevice: "query-device", OpQueryPort: "query-port",
	OpAllocPD: "alloc-pd", OpDeallocPD: "dealloc-pd", OpRegMR: "reg-mr", OpDeregMR: "dereg-mr",
	OpCreateCompChannel: "create-comp-channel", OpDestroyCompChannel: "destroy-comp-channel",
	OpCreateCQ: "create-cq", OpDestroyCQ: "destroy-cq",
	OpCreateQP: "create-qp", OpModifyQP: "modify-qp", OpQueryQP: "query-qp", OpDestroyQP: "destroy-qp",
	OpCreateSRQ: "create-srq", OpDestroySRQ: "destroy-srq",
	OpInspect: "inspect", OpListen: "listen", OpCloseListener: "close-listener", OpAccept: "accept",
	OpReject: "reject", OpConnect: "connect", OpDisconnect: "disconnect",
	OpAttachMcast: "attach-mcast", OpDetachMcast: "detach-mcast", OpReservePort: "reserve-port",
	OpFastpathPage: "fastpath-page",
}

func (op Op) String() string {
	base := op &^ OpReply
	name := fmt.Sprintf("op(%d)", uint16(base))
	switch {
	case base == OpEvent:
		name = "event"
	case base == OpCMEvent:
		name = "cm-event"
	case base > 0 && base < opCount && opNames[base] != "":
		name = opNames[base]
	}
	if op&OpReply != 0 {
		return name + " reply"
	}
	return name
}

// Valid reports whether op is a request the daemon knows.
func (op Op) Valid() bool { return op > 0 && op < opCount }

// Errors of the control framing.
var (
	ErrShortMessage = errors.New("proto: message shorter than its header")
	ErrBadMagic     = errors.New("proto: bad magic (not an iwarpd control message)")
	ErrTooLarge     = errors.New("proto: message larger than MaxMessage")
	ErrTooManyFDs   = errors.New("proto: too many file descriptors")
	// ErrFDsLost: a message arrived whole but its descriptors did not
	// (MSG_CTRUNC): the receiver has no free descriptor, or the sender
	// passed more than MaxFDs. Receive returns the header and body with it.
	ErrFDsLost = errors.New("proto: the message's descriptors were lost (the receiver is out of file descriptors, or more than MaxFDs were sent)")
)

// AppendHeader appends the wire form of h (with Magic) to b.
func (h Header) Append(b []byte) []byte {
	b = binary.LittleEndian.AppendUint32(b, Magic)
	b = binary.LittleEndian.AppendUint16(b, h.Version)
	b = binary.LittleEndian.AppendUint16(b, uint16(h.Op))
	b = binary.LittleEndian.AppendUint32(b, h.Seq)
	return binary.LittleEndian.AppendUint32(b, uint32(h.Status))
}

// ParseHeader decodes a message header and returns the body that follows.
// It does not check the version: callers compare it with ABIVersion and
// answer a mismatch with a VersionError.
func ParseHeader(b []byte) (Header, []byte, error) {
	if len(b) < HeaderLen {
		return Header{}, nil, fmt.Errorf("%w: %d bytes", ErrShortMessage, len(b))
	}
	if binary.LittleEndian.Uint32(b) != Magic {
		return Header{}, nil, ErrBadMagic
	}
	h := Header{
		Version: binary.LittleEndian.Uint16(b[4:]),
		Op:      Op(binary.LittleEndian.Uint16(b[6:])),
		Seq:     binary.LittleEndian.Uint32(b[8:]),
		Status:  unix.Errno(binary.LittleEndian.Uint32(b[12:])),
	}
	return h, b[HeaderLen:], nil
}

// Marshal builds a whole message: header and the JSON encoding of body (nil
// body = empty).
func Marshal(h Header, body any) ([]byte, error) {
	b := h.Append(make([]byte, 0, 256))
	if body != nil {
		js, err := json.Marshal(body)
		if err != nil {
			return nil, fmt.Errorf("proto: encoding %v body: %w", h.Op, err)
		}
		b = append(b, js...)
	}
	if len(b) > MaxMessage {
		return nil, fmt.Errorf("%w: %v is %d bytes", ErrTooLarge, h.Op, len(b))
	}
	return b, nil
}

// Unmarshal decodes a message body into v. An empty body leaves v as is.
// Unknown fields are rejected so that a malformed request is an error, not
// a silently different request.
func Unmarshal(body []byte, v any) error {
	if len(body) == 0 {
		return nil
	}
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return fmt.Errorf("proto: decoding body: %w", err)
	}
	if dec.More() {
		return errors.New("proto: decoding body: trailing data")
	}
	return nil
}

// Conn is one end of a control connection (SOCK_SEQPACKET): whole messages
// with optional file descriptors. It is safe for one reader and one writer
// at a time; callers serialize writers.
type Conn struct {
	uc  *net.UnixConn
	buf []byte
	oob []byte
}

// NewConn wraps an established unixpacket connection.
func NewConn(uc *net.UnixConn) *Conn {
	return &Conn{uc: uc, buf: make([]byte, MaxMessage), oob: make([]byte, unix.CmsgSpace(MaxFDs*4))}
}

// Dial connects to the daemon's control socket.
func Dial(path string) (*Conn, error) {
	uc, err := net.DialUnix("unixpacket", nil, &net.UnixAddr{Name: path, Net: "unixpacket"})
	if err != nil {
		return nil, err
	}
	return NewConn(uc), nil
}

// UnixConn returns the underlying connection (for peer credentials, deadlines).
func (c *Conn) UnixConn() *net.UnixConn { return c.uc }

// Close closes the connection.
func (c *Conn) Close() error { return c.uc.Close() }

// Send writes one message with its file descriptors (which stay open in the
// sender).
func (c *Conn) Send(h Header, body any, fds ...int) error {
	if len(fds) > MaxFDs {
		return ErrTooManyFDs
	}
	msg, err := Marshal(h, body)
	if err != nil {
		return err
	}
	var oob []byte
	if len(fds) > 0 {
		oob = unix.UnixRights(fds...)
	}
	if _, _, err := c.uc.WriteMsgUnix(msg, oob, nil); err != nil {
		return fmt.Errorf("proto: sending %v: %w", h.Op, err)
	}
	return nil
}

// TrySend writes one message like Send but never waits for room in the
// socket buffer (sendmsg(2) with MSG_DONTWAIT): when the peer does not read,
// it fails at once with an error wrapping unix.EAGAIN. The daemon sends
// events with it, so that a stopped client never holds a daemon goroutine.
func (c *Conn) TrySend(h Header, body any, fds ...int) error {
	if len(fds) > MaxFDs {
		return ErrTooManyFDs
	}
	msg, err := Marshal(h, body)
	if err != nil {
		return err
	}
	var oob []byte
	if len(fds) > 0 {
		oob = unix.UnixRights(fds...)
	}
	raw, err := c.uc.SyscallConn()
	if err != nil {
		return fmt.Errorf("proto: sending %v: %w", h.Op, err)
	}
	var serr error
	if err := raw.Write(func(fd uintptr) bool {
		for {
			serr = unix.Sendmsg(int(fd), msg, oob, nil, unix.MSG_DONTWAIT|unix.MSG_NOSIGNAL)
			if serr != unix.EINTR {
				return true // done either way: never wait for writability
			}
		}
	}); err != nil {
		return fmt.Errorf("proto: sending %v: %w", h.Op, err)
	}
	if serr != nil {
		return fmt.Errorf("proto: sending %v: %w", h.Op, serr)
	}
	return nil
}

// Receive reads one message. The returned body aliases an internal buffer
// valid until the next Receive. Received descriptors belong to the caller,
// who must close them, including when an error is returned with them.
func (c *Conn) Receive() (Header, []byte, []int, error) {
	n, oobn, flags, _, err := c.uc.ReadMsgUnix(c.buf, c.oob)
	if err != nil {
		return Header{}, nil, nil, err
	}
	var fds []int
	if oobn > 0 {
		msgs, perr := unix.ParseSocketControlMessage(c.oob[:oobn])
		if perr == nil {
			for i := range msgs {
				got, rerr := unix.ParseUnixRights(&msgs[i])
				if rerr == nil {
					fds = append(fds, got...)
				}
			}
		}
	}
	if flags&unix.MSG_TRUNC != 0 {
		return Header{}, nil, fds, ErrTooLarge
	}
	if n == 0 && flags&unix.MSG_CTRUNC == 0 {
		return Header{}, nil, fds, fmt.Errorf("proto: connection closed by peer: %w", errClosed)
	}
	h, body, err := ParseHeader(c.buf[:n])
	if err == nil && flags&unix.MSG_CTRUNC != 0 {
		err = ErrFDsLost
	}
	return h, body, fds, err
}

var errClosed = errors.New("end of stream")
