package main

import (
	"io"
	"testing"

	vcfg "github.com/iwarpd/iwarpd/verbsd/config"
)

func TestConfigMcastFlags(t *testing.T) {
	none := func(string) string { return "" }
	cfg, err := parseConfig(nil, none, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if want := (vcfg.McastConfig{TTL: 1}); cfg.Verbs.Mcast != want {
		t.Errorf("defaults: %+v, want %+v", cfg.Verbs.Mcast, want)
	}
	cfg, err = parseConfig([]string{"-mcast-if", "lo", "-mcast-ttl", "32", "-mcast-loop", "false"}, none, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if want := (vcfg.McastConfig{Interface: "lo", TTL: 32, NoLoop: true}); cfg.Verbs.Mcast != want {
		t.Errorf("flags: %+v, want %+v", cfg.Verbs.Mcast, want)
	}
	cfg, err = parseConfig(nil, func(k string) string { return map[string]string{"IWARPD_MCAST_TTL": "4"}[k] }, io.Discard)
	if err != nil || cfg.Verbs.Mcast.TTL != 4 {
		t.Errorf("environment: %+v, %v", cfg.Verbs.Mcast, err)
	}
	for _, bad := range [][]string{{"-mcast-if", "no-such-if0"}, {"-mcast-ttl", "0"}, {"-mcast-ttl", "256"},
		{"-mcast-loop", "perhaps"}} {
		if _, err := parseConfig(bad, none, io.Discard); err == nil {
			t.Errorf("%v accepted", bad)
		}
	}
}
