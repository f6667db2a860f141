package rnic

import (
	"bufio"
	"fmt"
	"net/netip"
	"os"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// Binds on behalf of clients. A daemon running as root
// could bind any port on any address; a client gets only
//   - ports inside the configured ranges (UDP: -ud-ports, -rd-ports; TCP
//     listeners: -listen-ports, or port 0),
//   - the address the device serves (Config.Addr; any local address only
//     when that is unspecified),
//   - a port below the kernel's ip_unprivileged_port_start
//     (/proc/sys/net/ipv4, 1024 by default; ip(7)) only if the client could
//     bind it itself: its uid is 0 or its effective capabilities hold
//     CAP_NET_BIND_SERVICE (capabilities(7)), read from /proc/PID/status
//     of the SO_PEERCRED pid when the session connects.

// capNetBindService is CAP_NET_BIND_SERVICE's bit (linux/capability.h).
const capNetBindService = 10

// UnprivilegedPortStart reads net.ipv4.ip_unprivileged_port_start (ip(7));
// 1024 when it cannot be read.
func UnprivilegedPortStart() uint16 {
	b, err := os.ReadFile("/proc/sys/net/ipv4/ip_unprivileged_port_start")
	if err != nil {
		return 1024
	}
	n, err := strconv.ParseUint(strings.TrimSpace(string(b)), 10, 16)
	if err != nil {
		return 1024
	}
	return uint16(n)
}

// MayBindPrivileged reports whether the peer (SO_PEERCRED) could bind a
// privileged port itself: uid 0, or CAP_NET_BIND_SERVICE in CapEff of
// /proc/PID/status (proc(5)). Unknown = no.
func MayBindPrivileged(cred unix.Ucred) bool {
	if cred.Pid <= 0 {
		return false
	}
	f, err := os.Open(fmt.Sprintf("/proc/%d/status", cred.Pid))
	if err != nil {
		return false
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for i := 0; i < 200 && sc.Scan(); i++ {
		if v, ok := strings.CutPrefix(sc.Text(), "CapEff:"); ok {
			caps, err := strconv.ParseUint(strings.TrimSpace(v), 16, 64)
			return err == nil && caps&(1<<capNetBindService) != 0
		}
	}
	return false
}

// Privileged reports whether port needs privilege to bind.
func Privileged(d *Device, port uint16) bool {
	return port != 0 && port < d.UnprivStart
}

// CheckClientPort refuses an explicit port the session may not have.
func (s *Session) CheckClientPort(op string, port uint16) error {
	if Privileged(s.Dev, port) && !s.PrivBind {
		return Errf(unix.EACCES, "%s: port %d is privileged (below %d) and this client (uid %d) may not bind it itself",
			op, port, s.Dev.UnprivStart, s.Cred.Uid)
	}
	return nil
}

// CheckListenAddr applies the rules above to an RC listener's address.
func (s *Session) CheckListenAddr(ap netip.AddrPort) error {
	dev := s.Dev.Cfg.Addr
	if dev.IsValid() && !dev.IsUnspecified() && ap.Addr() != dev {
		return Errf(unix.EADDRNOTAVAIL, "listen: %s is not the device's address; iwarpd serves %s (listen on %s or :PORT)",
			ap.Addr(), dev, netip.AddrPortFrom(dev, ap.Port()))
	}
	if p := ap.Port(); p != 0 && !s.Dev.Cfg.ListenPorts.Contains(p) {
		return Errf(unix.EACCES, "listen: port %d is outside the listener range %d-%d of this daemon (-listen-ports), or use port 0",
			p, s.Dev.Cfg.ListenPorts.First, s.Dev.Cfg.ListenPorts.Last)
	}
	return s.CheckClientPort("listen", ap.Port())
}
