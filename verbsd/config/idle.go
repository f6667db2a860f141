package config

import "fmt"

// IdleMode is the engine's wait discipline between passes (Config.Idle,
// rnic/idle.go, docs/iwarpd.md "-idle").
type IdleMode int

const (
	// IdleAdaptive yields until a yield or sleep shows the CPU contended,
	// then sleeps Config.IdleSleep instead for a while.
	IdleAdaptive IdleMode = iota
	// IdleYield always yields (sched_yield), the discipline before issue 20.
	IdleYield
)

func (m IdleMode) String() string {
	switch m {
	case IdleAdaptive:
		return "adaptive"
	case IdleYield:
		return "yield"
	}
	return fmt.Sprintf("IdleMode(%d)", int(m))
}

// ParseIdleMode reads "adaptive" or "yield".
func ParseIdleMode(s string) (IdleMode, error) {
	switch s {
	case "adaptive":
		return IdleAdaptive, nil
	case "yield":
		return IdleYield, nil
	}
	return 0, fmt.Errorf("idle mode %q: want adaptive or yield", s)
}
