package verbsd

import (
	"sync"

	"golang.org/x/sys/unix"
)

// setSendmmsg makes every engine of srv send through f (a test's wrapper
// of sysSendmmsg), one call at a time: f may keep unsynchronized state.
func setSendmmsg(srv *Server, f func(fd int, msgs []unix.Mmsghdr) (int, error)) {
	var mu sync.Mutex
	srv.eng.Do(func() error {
		for _, e := range srv.dev.Engs {
			engOf(e).sendmmsg = func(fd int, msgs []unix.Mmsghdr) (int, error) {
				mu.Lock()
				defer mu.Unlock()
				return f(fd, msgs)
			}
		}
		return nil
	})
}

// allQPs is every QP of srv, engine by engine (inside a command).
func (srv *Server) allQPs() []*qp {
	var qs []*qp
	for _, e := range srv.dev.Engs {
		for _, q := range e.QPs {
			qs = append(qs, qpOf(q))
		}
	}
	return qs
}
