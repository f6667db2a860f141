package cclient

import (
	"context"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/iwarpd/iwarpd/test/daemontest"
)

// TestFastpathGROSwitch: the rank's switch of UDP_GRO off
// (iwvi_fp_own_set_gro, c/core/fpown.c) is refused while a buffer the
// kernel coalesced is queued, which read with UDP_GRO off would pass for
// one datagram — the drop_crc of the MPI 1 MiB runs (issue 20), wrong
// octets with CRC off — and goes through on an empty queue (t_fpgro.c:
// real loopback sockets, a UDP GSO send; no daemon).
func TestFastpathGROSwitch(t *testing.T) {
	needC(t)
	ctx, cancel := context.WithTimeout(context.Background(), daemontest.Scaled(60*time.Second))
	defer cancel()
	cmd := cmdCIn(ctx, t, cBuild, "t_fpgro", &daemontest.Daemon{}, nil)
	out, err := cmd.CombinedOutput()
	if strings.HasPrefix(string(out), "SKIP") {
		t.Skip(strings.TrimSpace(string(out)))
	}
	if err != nil {
		t.Fatalf("%s: %v\n%s", filepath.Base(cmd.Path), err, out)
	}
	mustPass(t, "t_fpgro", string(out))
}
