package config

import (
	"bufio"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
)

// The memory-bound defaults fit the machine (issue 18, defect 3: a fixed
// 64 GiB per user was more than the RAM of most nodes). With M the
// machine's RAM (/proc/meminfo MemTotal, read once at start):
//
//	user-max-registered-bytes = 2M   (M/2 when the daemon has no hole guard)
//	max-registered-bytes      = min(4 GiB, M/4)   (per session)
//	max-mr-size               = min(4 GiB, max-registered-bytes)
//	user-max-sessions         = M/4 / 16 MiB, within [64, 1024]
//	                            (a session may keep 16 MiB of staging buffers)
//	user-max-qp               = M/8 / 256 KiB, within [256, 16384]
//	                            (an RC QP's socket buffers and receive buffer)
//	user-max-ports            = M/8 / (2 × 4 MiB), within [64, 4096]
//	                            (a datagram QP's socket buffers at the default
//	                            -socket-buffer, both directions)
//	user-max-held-bytes       = M/8
//	                            (RC messages held in the daemon for want of
//	                            a receive, rc/hold.go)
//
// user-max-listeners stays 1024 (a listening socket holds no data). What
// the daemon maps of a client (registered memory, rings) is the client's
// own memory (rnic/holeguard.go), and a registration pins nothing: a page
// is memory only once its owner touches it, charged to the owner. So
// registered octets are not memory: fabtests' fi_rdm_atomic registers
// 3 GiB per process and touches 1-2 (issue 19: with the old M/2, four
// pairs of one user on a 23.5 GiB machine exhausted it and fi_mr_reg
// failed). What a registered octet costs the daemon is its page-table
// entry for a memfd region it maps (8 octets per 4 KiB page; process
// memory, reached through /proc/PID/mem, costs it nothing): at 2M a
// user's registrations cost the daemon at most M/256.
// Without the hole guard the daemon itself allocates a page its client
// punched out after registering it (docs/security.md), so registered
// octets may become daemon memory: then the default stays M/2 (Unguarded).
// Every value can be set (docs/iwarpd.md "Limits per user").

// Share rules, also printed in the daemon's start log.
const (
	sessionStaging = 16 << 20  // rnic/stage.go: staging kept per session
	qpCost         = 256 << 10 // an RC QP's socket buffers and receive buffer
	portCost       = 2 * (4 << 20)
)

// MachineRule says the rule above in one line (the start log).
const MachineRule = "user-max-registered-bytes 2M (M/2 without the hole guard); max-registered-bytes min(4G, M/4); max-mr-size min(4G, max-registered-bytes); " +
	"user-max-sessions M/4/16M in [64,1024]; user-max-qp M/8/256K in [256,16384]; user-max-ports M/8/8M in [64,4096]; user-max-held-bytes M/8"

var memTotal struct {
	once sync.Once
	n    uint64
}

// MemTotal is the machine's RAM in octets (/proc/meminfo MemTotal), 0 if
// unknown; read once.
func MemTotal() uint64 {
	memTotal.once.Do(func() {
		f, err := os.Open("/proc/meminfo")
		if err != nil {
			return
		}
		defer f.Close()
		sc := bufio.NewScanner(f)
		for sc.Scan() {
			if fl := strings.Fields(sc.Text()); len(fl) >= 2 && fl[0] == "MemTotal:" {
				if kb, err := strconv.ParseUint(fl[1], 10, 64); err == nil {
					memTotal.n = kb << 10
				}
				return
			}
		}
	})
	return memTotal.n
}

// FitToMachine sets the memory-bound defaults of c for a machine of m
// octets of RAM (the rule above); m == 0 (unknown) leaves the fixed
// defaults.
func (c *Config) FitToMachine(m uint64) {
	if m == 0 {
		return
	}
	clamp := func(v, lo, hi uint64) int { return int(max(lo, min(v, hi))) }
	const mib = 1 << 20
	c.UserLimits.Registered = guardedRegistered(m)
	c.Limits.MaxRegistered = min(4<<30, m/4&^(mib-1))
	c.Limits.MaxMRSize = min(4<<30, c.Limits.MaxRegistered)
	c.UserLimits.Sessions = clamp(m/4/sessionStaging, 64, 1024)
	c.UserLimits.QPs = clamp(m/8/qpCost, 256, 16384)
	c.UserLimits.Ports = clamp(m/8/portCost, 64, 4096)
	c.UserLimits.Held = m / 8 &^ (mib - 1)
}

func guardedRegistered(m uint64) uint64   { return 2 * m &^ (1<<20 - 1) }
func unguardedRegistered(m uint64) uint64 { return m / 2 &^ (1<<20 - 1) }

// Unguarded lowers user-max-registered-bytes from its default for a
// machine of m octets to the share of a daemon without the hole guard
// (rnic.HoleGuard: a client can then make the daemon allocate what it
// registered), and reports whether it did; a value set by flag or file
// (any other than the default) stays.
func (c *Config) Unguarded(m uint64) bool {
	if m == 0 || c.UserLimits.Registered != guardedRegistered(m) {
		return false
	}
	c.UserLimits.Registered = unguardedRegistered(m)
	return true
}

// LimitsSummary says the memory-bound limits in force, for the start log.
func (c *Config) LimitsSummary() string {
	return fmt.Sprintf("user-max-registered-bytes %d, max-registered-bytes %d, max-mr-size %d, user-max-sessions %d, "+
		"user-max-qp %d, user-max-ports %d, user-max-held-bytes %d", c.UserLimits.Registered, c.Limits.MaxRegistered, c.Limits.MaxMRSize,
		c.UserLimits.Sessions, c.UserLimits.QPs, c.UserLimits.Ports, c.UserLimits.Held)
}
