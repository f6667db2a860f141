package verbsd

import (
	"github.com/iwarpd/iwarpd/proto"
)

// Control requests of the connection manager (cm*.go).

func init() {
	// control.go's init (which runs first: files initialise in name order)
	// creates the table.
	handlers[proto.OpListen] = (*session).listenOp
	handlers[proto.OpCloseListener] = (*session).closeListenerOp
	handlers[proto.OpAccept] = (*session).acceptOp
	handlers[proto.OpReject] = (*session).rejectOp
	handlers[proto.OpConnect] = (*session).connectOp
	handlers[proto.OpDisconnect] = (*session).disconnectOp
}

func (s *session) listenOp(body []byte, _ []int) (any, error) {
	var req proto.ListenRequest
	if err := decode(body, &req); err != nil {
		return nil, err
	}
	l, err := s.rc.Listen(req.Addr, req.Backlog)
	if err != nil {
		return nil, err
	}
	return &proto.ListenReply{Handle: l.Handle, Addr: l.Addr.String()}, nil
}

func (s *session) closeListenerOp(body []byte, _ []int) (any, error) {
	var req proto.Handle
	if err := decode(body, &req); err != nil {
		return nil, err
	}
	return nil, s.rc.CloseListener(req.Handle)
}

func (s *session) acceptOp(body []byte, _ []int) (any, error) {
	var req proto.AcceptRequest
	if err := decode(body, &req); err != nil {
		return nil, err
	}
	ev, err := s.rc.Accept(req)
	if err != nil {
		return nil, err
	}
	return ev, nil
}

func (s *session) rejectOp(body []byte, _ []int) (any, error) {
	var req proto.RejectRequest
	if err := decode(body, &req); err != nil {
		return nil, err
	}
	return nil, s.rc.Reject(req)
}

func (s *session) connectOp(body []byte, _ []int) (any, error) {
	var req proto.ConnectRequest
	if err := decode(body, &req); err != nil {
		return nil, err
	}
	if err := s.CheckClientPort("connect", req.LocalPort); err != nil { // rnic/bind.go
		return nil, err
	}
	return nil, s.rc.Connect(req)
}

// disconnectOp cancels a Connect in progress, or asks the engine to end the
// connection (gracefully, or abortively with a Terminate). The end is
// reported by a CMDisconnected event.
func (s *session) disconnectOp(body []byte, _ []int) (any, error) {
	var req proto.DisconnectRequest
	if err := decode(body, &req); err != nil {
		return nil, err
	}
	if s.rc.CancelConnect(req.QP) {
		return nil, nil
	}
	return nil, s.rc.Disconnect(req.QP, req.Abort) // rc/cm.go

}
