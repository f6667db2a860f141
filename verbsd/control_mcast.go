package verbsd

import (
	"github.com/iwarpd/iwarpd/proto"
	"github.com/iwarpd/iwarpd/verbsd/rnic"
	"github.com/iwarpd/iwarpd/verbsd/ud"
	"golang.org/x/sys/unix"
)

// Control requests of UD multicast (ud/mcast.go).

func init() {
	// control.go's init (which runs first: files initialise in name order)
	// creates the table.
	handlers[proto.OpAttachMcast] = (*session).attachMcastOp
	handlers[proto.OpDetachMcast] = (*session).detachMcastOp
}

func (s *session) attachMcastOp(body []byte, _ []int) (any, error) {
	return s.mcastOp(body, true)
}

func (s *session) detachMcastOp(body []byte, _ []int) (any, error) {
	return s.mcastOp(body, false)
}

func (s *session) mcastOp(body []byte, attach bool) (any, error) {
	var req proto.McastRequest
	if err := decode(body, &req); err != nil {
		return nil, err
	}
	g, err := ud.ParseGroup(req.Group)
	if err != nil {
		return nil, err
	}
	return nil, s.Eng.Do(func() error {
		q := s.QPs[req.QP]
		if q == nil {
			return rnic.Errf(unix.EINVAL, "multicast: no QP %d", req.QP)
		}
		if attach {
			return ud.AttachMcast(q, g) // ud/mcast.go
		}
		return ud.DetachMcast(q, g)
	})
}
