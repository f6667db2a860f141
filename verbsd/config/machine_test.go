package config

import "testing"

// TestFitToMachine: the memory-bound defaults follow the rule of
// machine.go for a small, a medium and a large machine, and an unknown
// size (0) keeps the fixed ceilings.
func TestFitToMachine(t *testing.T) {
	const gib, mib = 1 << 30, 1 << 20
	for _, c := range []struct {
		m                    uint64
		userReg, sessReg     uint64
		sessions, qps, ports int
	}{
		{2 * gib, 1 * gib, 512 * mib, 64, 1024, 64},
		{24 * gib, 12 * gib, 4 * gib, 384, 12288, 384},
		{1024 * gib, 512 * gib, 4 * gib, 1024, 16384, 4096},
	} {
		cfg := Config{Limits: DefaultLimits, UserLimits: DefaultUserLimits}
		cfg.FitToMachine(c.m)
		u, l := cfg.UserLimits, cfg.Limits
		if u.Registered != c.userReg || l.MaxRegistered != c.sessReg || l.MaxMRSize != c.sessReg ||
			u.Sessions != c.sessions || u.QPs != c.qps || u.Ports != c.ports || u.Listeners != DefaultUserLimits.Listeners {
			t.Errorf("M = %d GiB: %s; want user %d, session %d, sessions %d, qps %d, ports %d", c.m/gib, cfg.LimitsSummary(),
				c.userReg, c.sessReg, c.sessions, c.qps, c.ports)
		}
	}
	cfg := Config{Limits: DefaultLimits, UserLimits: DefaultUserLimits}
	cfg.FitToMachine(0)
	if cfg.UserLimits != DefaultUserLimits || cfg.Limits != DefaultLimits {
		t.Errorf("unknown RAM changed the defaults: %s", cfg.LimitsSummary())
	}
	if MemTotal() == 0 {
		t.Log("no MemTotal in /proc/meminfo here")
	}
}
