package verbsd

import (
	"github.com/iwarpd/iwarpd/proto"
	"github.com/iwarpd/iwarpd/verbsd/rnic"
	"github.com/iwarpd/iwarpd/verbsd/ud"
	"golang.org/x/sys/unix"
)

// The fast-path page of a UD QP (ABI 5, proto/fastpath.go,
// rnic/fastpath.go, docs/fastpath.md): fastpath-page hands it over.

func init() {
	handlers[proto.OpFastpathPage] = (*session).fastpathPageOp
}

// fastpathPageOp installs the page of descriptor 0 on a UD QP whose socket
// is the client's own (create-qp with socket): the rank may then read that
// socket itself while it owns it.
func (s *session) fastpathPageOp(body []byte, fds []int) (any, error) {
	var req proto.FastpathPageRequest
	if err := decode(body, &req); err != nil {
		return nil, err
	}
	fd, err := takeFD(fds, 0, "fastpath-page")
	if err != nil {
		return nil, err
	}
	// The page's length depends on the QP's type (an RD QP's carries its
	// RD halves, proto/fastpath_rd.go): looked up first, checked again on
	// the engine.
	typ := proto.QPTypeUD
	s.Eng.Do(func() error {
		if q := s.QPs[req.QP]; q != nil {
			typ = q.Type
		}
		return nil
	})
	f, err := rnic.NewFastpathLen(fd, proto.FastpathPageLenOf(typ)) // closes fd on error
	if err != nil {
		return nil, err
	}
	err = s.Eng.Do(func() error {
		q := s.QPs[req.QP]
		switch {
		case q == nil:
			return rnic.Errf(unix.EINVAL, "fastpath-page: no QP %d", req.QP)
		case q.Type != typ || (q.Type != proto.QPTypeUD && q.Type != proto.QPTypeRD):
			return rnic.Errf(unix.EOPNOTSUPP, "fastpath-page: QP %d is %v: only UD and RD QPs have a fast path", req.QP, q.Type)
		case !q.ClientSock:
			return rnic.Errf(unix.EINVAL, "fastpath-page: QP %d's socket is iwarpd's: the fast path reads the client's own socket; create the QP with its socket (reserve-port, create-qp socket)", req.QP)
		case q.FP != nil:
			return rnic.Errf(unix.EEXIST, "fastpath-page: QP %d has its page already", req.QP)
		case q.SockDead:
			return rnic.Errf(unix.EINVAL, "fastpath-page: QP %d's socket failed (%s); destroy the QP", req.QP, q.ErrWhy)
		}
		ud.SetFastpath(q, f) // ud/fastpath.go
		return nil
	})
	if err != nil {
		f.Close()
		return nil, err
	}
	return nil, nil
}
