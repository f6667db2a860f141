package main

import (
	"bytes"
	"testing"
)

// TestConfigEngines: -engines, IWARPD_ENGINES and the config file key set
// config.Config.Engines (docs/engines.md); out of range is refused.
func TestConfigEngines(t *testing.T) {
	var usage bytes.Buffer
	none := func(string) string { return "" }
	cfg, err := parseConfig(nil, none, &usage)
	if err != nil || cfg.Verbs.Engines != 1 {
		t.Fatalf("default: engines %d, %v; want 1", cfg.Verbs.Engines, err)
	}
	env := func(k string) string {
		if k == "IWARPD_ENGINES" {
			return "3"
		}
		return ""
	}
	if cfg, err = parseConfig(nil, env, &usage); err != nil || cfg.Verbs.Engines != 3 {
		t.Fatalf("IWARPD_ENGINES=3: engines %d, %v", cfg.Verbs.Engines, err)
	}
	if cfg, err = parseConfig([]string{"-engines", "2"}, env, &usage); err != nil || cfg.Verbs.Engines != 2 {
		t.Fatalf("-engines 2 over IWARPD_ENGINES=3: engines %d, %v", cfg.Verbs.Engines, err)
	}
	for _, bad := range []string{"65", "-1", "two"} {
		c, err := parseConfig([]string{"-engines", bad}, none, &usage)
		if err == nil {
			err = c.Verbs.Validate()
		}
		if err == nil {
			t.Errorf("-engines %s accepted", bad)
		}
	}
}
