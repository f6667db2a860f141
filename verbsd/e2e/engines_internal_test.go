package e2e

import (
	"sync"

	"github.com/iwarpd/iwarpd/verbsd"
	"github.com/iwarpd/iwarpd/verbsd/rnic"
	"github.com/iwarpd/iwarpd/verbsd/ud"
	"golang.org/x/sys/unix"
)

// setSendmmsg makes every engine of srv send through f (a test's wrapper
// of SysSendmmsg), one call at a time: f may keep unsynchronized state.
func setSendmmsg(srv *verbsd.Server, f func(fd int, msgs []unix.Mmsghdr) (int, error)) {
	var mu sync.Mutex
	srv.Device().Engs[0].Do(func() error {
		for _, e := range srv.Device().Engs {
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
func allQPs(srv *verbsd.Server) []*rnic.QP {
	var qs []*rnic.QP
	for _, e := range srv.Device().Engs {
		qs = append(qs, e.QPs...)
	}
	return qs
}
