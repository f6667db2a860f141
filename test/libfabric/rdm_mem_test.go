package libfabric

import (
	"context"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/iwarpd/iwarpd/test/daemontest"
)

// TestRDMEndpointMemory runs c/prov/tests/fi_rdm_mem.c (docs/memory.md
// "An RDM rank"):
//
//   - lazy: fi_domain maps no staging, an RDM endpoint's transmit bounce
//     pool is sized from tx_attr->size + IWD_TX_EXTRA (not the send queue
//     rounded up to 512), eager sends map nothing more, and the first
//     rendezvous send of an unregistered buffer maps the staging
//     (FI_IWARPD_STAGING) and delivers its data;
//   - nomem: with a staging libiwverbs cannot create (2 TiB, past its
//     1 TiB bound), the first use fails as the operation's error —
//     fi_sendv returns -FI_ENOMEM, a rendezvous receive into an
//     unregistered buffer completes with FI_ENOMEM — and the process and
//     the daemon live on.
func TestRDMEndpointMemory(t *testing.T) {
	needProvider(t)
	bin := buildProvProgram(t, "fi_rdm_mem")
	for _, c := range []struct {
		mode string
		env  []string
	}{
		{"lazy", nil},
		{"nomem", []string{"FI_IWARPD_STAGING=2199023255552"}},
	} {
		t.Run(c.mode, func(t *testing.T) {
			d := daemon(t, "rdm-mem-"+c.mode, daemontest.Options{})
			// A bound against a hang only.
			ctx, cancel := context.WithTimeout(context.Background(), daemontest.Scaled(2*time.Minute))
			defer cancel()
			cmd := exec.CommandContext(ctx, bin, "iwarpd", c.mode)
			cmd.Env = fiEnv(d, append(append([]string{"ASAN_OPTIONS=detect_leaks=0"}, native...), c.env...)...)
			out, err := cmd.CombinedOutput()
			if err != nil || !strings.Contains(string(out), "fi_rdm_mem: ok") {
				t.Fatalf("fi_rdm_mem %s: %v\n%s", c.mode, err, out)
			}
			t.Log(strings.TrimSpace(string(out)))
			d.CheckAlive(t)
		})
	}
}
