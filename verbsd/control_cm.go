package verbsd

import (
	"github.com/iwarpd/iwarpd/proto"
	"golang.org/x/sys/unix"
)

// Control requests of the connection manager (cm*.go).

func init() {
	// control.go's init (which runs first: files initialise in name order)
	// creates the table.
	handlers[proto.OpListen] = (*Session).listenOp
	handlers[proto.OpCloseListener] = (*Session).closeListenerOp
	handlers[proto.OpAccept] = (*Session).acceptOp
	handlers[proto.OpReject] = (*Session).rejectOp
	handlers[proto.OpConnect] = (*Session).connectOp
	handlers[proto.OpDisconnect] = (*Session).disconnectOp
}

func (s *Session) listenOp(body []byte, _ []int) (any, error) {
	var req proto.ListenRequest
	if err := decode(body, &req); err != nil {
		return nil, err
	}
	l, err := s.listen(req.Addr, req.Backlog)
	if err != nil {
		return nil, err
	}
	return &proto.ListenReply{Handle: l.handle, Addr: l.addr.String()}, nil
}

func (s *Session) closeListenerOp(body []byte, _ []int) (any, error) {
	var req proto.Handle
	if err := decode(body, &req); err != nil {
		return nil, err
	}
	return nil, s.closeListener(req.Handle)
}

func (s *Session) acceptOp(body []byte, _ []int) (any, error) {
	var req proto.AcceptRequest
	if err := decode(body, &req); err != nil {
		return nil, err
	}
	ev, err := s.accept(req)
	if err != nil {
		return nil, err
	}
	return ev, nil
}

func (s *Session) rejectOp(body []byte, _ []int) (any, error) {
	var req proto.RejectRequest
	if err := decode(body, &req); err != nil {
		return nil, err
	}
	return nil, s.reject(req)
}

func (s *Session) connectOp(body []byte, _ []int) (any, error) {
	var req proto.ConnectRequest
	if err := decode(body, &req); err != nil {
		return nil, err
	}
	return nil, s.connect(req)
}

// disconnectOp cancels a Connect in progress, or asks the engine to end the
// connection (gracefully, or abortively with a Terminate). The end is
// reported by a CMDisconnected event.
func (s *Session) disconnectOp(body []byte, _ []int) (any, error) {
	var req proto.DisconnectRequest
	if err := decode(body, &req); err != nil {
		return nil, err
	}
	if s.cancelConnect(req.QP) {
		return nil, nil
	}
	return nil, s.eng.Do(func() error {
		q := s.qp(req.QP)
		switch {
		case q == nil:
			return errf(unix.EINVAL, "disconnect: no QP %d", req.QP)
		case q.typ != proto.QPTypeRC:
			return errf(unix.EINVAL, "disconnect: QP %d is %v, not RC", req.QP, q.typ)
		case q.rc == nil:
			return errf(unix.ENOTCONN, "disconnect: QP %d is not connected", req.QP)
		}
		q.e.disconnectRC(q, req.Abort)
		return nil
	})
}
