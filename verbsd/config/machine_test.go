package config

import "testing"

// TestFitToMachine: the memory-bound defaults follow the rule of
// machine.go for a small, a medium and a large machine, and an unknown
// size (0) keeps the fixed ceilings; without the hole guard the
// registered share falls back to M/2 unless it was set.
func TestFitToMachine(t *testing.T) {
	const gib, mib = 1 << 30, 1 << 20
	for _, c := range []struct {
		m                    uint64
		userReg, sessReg     uint64
		sessions, qps, ports int
	}{
		{2 * gib, 4 * gib, 512 * mib, 64, 1024, 64},
		{24 * gib, 48 * gib, 4 * gib, 384, 12288, 384},
		{1024 * gib, 2048 * gib, 4 * gib, 1024, 16384, 4096},
	} {
		cfg := Config{Limits: DefaultLimits, UserLimits: DefaultUserLimits}
		cfg.FitToMachine(c.m)
		u, l := cfg.UserLimits, cfg.Limits
		if u.Registered != c.userReg || l.MaxRegistered != c.sessReg || l.MaxMRSize != c.sessReg ||
			u.Sessions != c.sessions || u.QPs != c.qps || u.Ports != c.ports || u.Listeners != DefaultUserLimits.Listeners {
			t.Errorf("M = %d GiB: %s; want user %d, session %d, sessions %d, qps %d, ports %d", c.m/gib, cfg.LimitsSummary(),
				c.userReg, c.sessReg, c.sessions, c.qps, c.ports)
		}
		// Without the hole guard the default registered share is M/4 of
		// the guarded one (M/2); a value set by flag or file stays.
		if !cfg.Unguarded(c.m) || cfg.UserLimits.Registered != c.userReg/4 {
			t.Errorf("M = %d GiB unguarded: user-max-registered-bytes %d, want %d", c.m/gib, cfg.UserLimits.Registered, c.userReg/4)
		}
		cfg.UserLimits.Registered = 5 * gib
		if cfg.Unguarded(c.m) || cfg.UserLimits.Registered != 5*gib {
			t.Errorf("M = %d GiB unguarded: a set user-max-registered-bytes changed to %d", c.m/gib, cfg.UserLimits.Registered)
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
