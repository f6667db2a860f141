package hostile

import (
	"fmt"
	"time"

	"github.com/iwarpd/iwarpd/proto"
	"golang.org/x/sys/unix"
)

// rawClient speaks proto directly, as a hostile client does: it sends
// whatever descriptors it likes where ofverbs would send sealed memfds.
type rawClient struct {
	c   *proto.Conn
	seq uint32
}

// rawError is a failed request: the errno of the reply and its message.
type rawError struct {
	Errno unix.Errno
	Msg   string
}

func (e *rawError) Error() string { return fmt.Sprintf("%s (%v)", e.Msg, e.Errno) }
func (e *rawError) Unwrap() error { return e.Errno }

// rawOpen connects to sock and says hello; the daemon's descriptors in the
// reply are closed (a raw client does not use them).
func rawOpen(sock string) (*rawClient, error) {
	c, err := proto.Dial(sock)
	if err != nil {
		return nil, err
	}
	r := &rawClient{c: c}
	if _, err := r.call(proto.OpHello, proto.HelloRequest{ABI: proto.ABIVersion, Client: "hostile"}, nil); err != nil {
		c.Close()
		return nil, err
	}
	return r, nil
}

func (r *rawClient) Close() { r.c.Close() }

// call sends one request and waits (bounded) for its reply, skipping
// events; a failed request returns a *rawError.
func (r *rawClient) call(op proto.Op, body any, reply any, fds ...int) (proto.Header, error) {
	r.seq++
	if err := r.c.Send(proto.Header{Version: proto.ABIVersion, Op: op, Seq: r.seq}, body, fds...); err != nil {
		return proto.Header{}, err
	}
	r.c.UnixConn().SetReadDeadline(time.Now().Add(30 * time.Second))
	for range 1000 {
		h, b, rfds, err := r.c.Receive()
		for _, fd := range rfds {
			unix.Close(fd)
		}
		if err != nil {
			return h, err
		}
		if h.Op&proto.OpEvent != 0 || h.Seq != r.seq {
			continue
		}
		if h.Status != 0 {
			var eb proto.ErrorBody
			proto.Unmarshal(b, &eb)
			return h, &rawError{Errno: h.Status, Msg: eb.Error}
		}
		if reply != nil {
			if err := proto.Unmarshal(b, reply); err != nil {
				return h, err
			}
		}
		return h, nil
	}
	return proto.Header{}, fmt.Errorf("no reply to %v among 1000 messages", op)
}
