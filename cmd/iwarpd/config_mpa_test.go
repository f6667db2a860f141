package main

import (
	"io"
	"testing"
	"time"

	vcfg "github.com/iwarpd/iwarpd/verbsd/config"

	"github.com/iwarpd/iwarpd/proto"
)

func TestConfigMPAFlags(t *testing.T) {
	none := func(string) string { return "" }
	cfg, err := parseConfig(nil, none, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	want := vcfg.MPAConfig{Revision: 2, CRC: proto.MPACRCPreferred, RTR: proto.RTRWrite | proto.RTRRead,
		IRD: 16, ORD: 16, Timeout: 10 * time.Second}
	if cfg.Verbs.MPA != want {
		t.Errorf("defaults: %+v, want %+v", cfg.Verbs.MPA, want)
	}
	cfg, err = parseConfig([]string{"-mpa-rev", "1", "-mpa-crc", "off", "-mpa-markers", "true", "-mpa-rtr", "send, read",
		"-mpa-timeout", "250ms", "-rc-ird", "4", "-rc-ord", "128"}, none, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	want = vcfg.MPAConfig{Revision: 1, CRC: proto.MPACRCOff, Markers: true, RTR: proto.RTRSend | proto.RTRRead,
		IRD: 4, ORD: 128, Timeout: 250 * time.Millisecond}
	if cfg.Verbs.MPA != want {
		t.Errorf("flags: %+v, want %+v", cfg.Verbs.MPA, want)
	}
	cfg, err = parseConfig(nil, func(k string) string {
		return map[string]string{"IWARPD_MPA_CRC": "required", "IWARPD_MPA_P2P": "true"}[k]
	}, io.Discard)
	if err != nil || cfg.Verbs.MPA.CRC != proto.MPACRCRequired || !cfg.Verbs.MPA.PeerToPeer {
		t.Errorf("environment: %+v, %v", cfg.Verbs.MPA, err)
	}
	for _, bad := range [][]string{{"-mpa-rev", "3"}, {"-mpa-crc", "maybe"}, {"-mpa-markers", "yes please"},
		{"-mpa-rtr", "write,fax"}, {"-mpa-timeout", "0s"}, {"-rc-ird", "0"}, {"-rc-ord", "129"},
		{"-mpa-rev", "1", "-mpa-p2p", "true"}} {
		if _, err := parseConfig(bad, none, io.Discard); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
}
