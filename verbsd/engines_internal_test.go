package verbsd

import (
	"sync"

	"github.com/iwarpd/iwarpd/verbsd/rnic"
	"github.com/iwarpd/iwarpd/verbsd/ud"
	"golang.org/x/sys/unix"
)

// setSendmmsg makes every engine of srv send through f (a test's wrapper
// of SysSendmmsg), one call at a time: f may keep unsynchronized state.
func setSendmmsg(srv *Server, f func(fd int, msgs []unix.Mmsghdr) (int, error)) {
	var mu sync.Mutex
	srv.eng.Do(func() error {
		for _, e := range srv.dev.Engs {
			ud.EngOf(e).Sendmmsg = func(fd int, msgs []unix.Mmsghdr) (int, error) {
				mu.Lock()
				defer mu.Unlock()
				return f(fd, msgs)
			}
		}
		return nil
	})
}

// allQPs is every QP of srv, engine by engine (inside a command).
func (srv *Server) allQPs() []*rnic.QP {
	var qs []*rnic.QP
	for _, e := range srv.dev.Engs {
		qs = append(qs, e.QPs...)
	}
	return qs
}
