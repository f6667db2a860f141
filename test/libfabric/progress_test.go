package libfabric

import (
	"context"
	"fmt"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/iwarpd/iwarpd/test/daemontest"
)

var (
	progOnce sync.Once
	progBin  string
	progErr  string
)

// buildProgress compiles c/prov/tests/fi_progress.c (a libfabric program:
// it links only -lfabric) into TestMain's temporary directory.
func buildProgress() {
	root, err := daemontest.ModuleRoot()
	if err != nil {
		progErr = err.Error()
		return
	}
	bin := filepath.Join(progDir, "fi_progress")
	out, err := exec.Command("cc", "-std=gnu11", "-O2", "-g", "-Wall", "-Wextra", "-Werror", "-o", bin,
		filepath.Join(root, "c", "prov", "tests", "fi_progress.c"), "-lfabric").CombinedOutput()
	if err != nil {
		progErr = fmt.Sprintf("cc fi_progress.c: %v\n%s", err, out)
		return
	}
	progBin = bin
}

// TestProgress is issue 10's "FI_PROGRESS_AUTO for data: show the
// difference". The target of a 4 MiB operation computes without calling
// libfabric (fi_progress.c) until the initiator reports completion over
// TCP, or for a bounded time: "progressed" means the data moved while the
// target computed. Over the iwarpd provider the daemon is the RNIC: an RMA
// Read of the target's memory completes meanwhile, and so does a
// rendezvous send with FI_IWARPD_PROGRESS_THREAD=1 (without it the target's
// provider must issue the rendezvous Read: it waits). ofi_rxm passes RMA to
// the MSG endpoint (the daemon moves it) but its rendezvous waits; ofi_rxd
// moves nothing without the target's calls. The "writes" rows split the
// operation into 64 writes against a target with 8 bounce receives
// (FI_IWARPD_RX_BUFS): an RDM fi_write takes none of them (the target's QP
// has quiet_records), so all 64 complete while the target computes; when
// each took one, the ninth waited for the target's next call.
func TestProgress(t *testing.T) {
	needProvider(t)
	progOnce.Do(buildProgress)
	if progErr != "" {
		t.Fatal(progErr)
	}
	da := daemon(t, "prog-a", daemontest.Options{})
	db := daemon(t, "prog-b", daemontest.Options{})
	const size = 4 << 20
	for _, c := range []struct {
		prov, op string
		env      []string
		want     string
		count    int // operations the size is split into (0: one)
	}{
		{"iwarpd", "read", native, "progressed", 0},
		{"iwarpd", "write", native, "progressed", 0},
		{"iwarpd", "write", append([]string{"FI_IWARPD_RX_BUFS=8"}, native...), "progressed", 64},
		{"iwarpd", "send", native, "waited", 0},
		{"iwarpd", "send", append([]string{"FI_IWARPD_PROGRESS_THREAD=1"}, native...), "progressed", 0},
		{"iwarpd;ofi_rxm", "read", nil, "progressed", 0},
		{"iwarpd;ofi_rxm", "write", nil, "progressed", 0},
		{"iwarpd;ofi_rxm", "write", nil, "progressed", 64},
		{"iwarpd;ofi_rxm", "send", nil, "waited", 0},
		{"iwarpd;ofi_rxd", "read", nil, "waited", 0},
		{"iwarpd;ofi_rxd", "write", nil, "waited", 0},
		{"iwarpd;ofi_rxd", "send", nil, "waited", 0},
	} {
		name := strings.ReplaceAll(c.prov, ";", "+") + "/" + c.op
		if len(c.env) > len(native) && c.count == 0 {
			name += "/progress-thread"
		}
		if c.count > 0 {
			name += fmt.Sprintf("/%d-writes", c.count)
		}
		t.Run(name, func(t *testing.T) {
			// A "progressed" run ends as soon as the initiator completes:
			// give it a generous window. A "waited" run lasts the window.
			busy := time.Second
			if c.want == "progressed" {
				busy = daemontest.Scaled(5 * time.Second)
			}
			line := runProgress(t, c.prov, c.op, size, c.count, busy, da, db, c.env)
			f := strings.Fields(line)
			if len(f) != 6 || f[0] != "progress" {
				t.Fatalf("fi_progress printed %q", line)
			}
			t.Logf("%s %s %d octets: %s (initiator completed after %s ms, target computed %s ms)",
				c.prov, c.op, size, f[3], f[4], f[5])
			if f[3] != c.want {
				t.Errorf("%s %s: %s, want %s", c.prov, c.op, f[3], c.want)
			}
		})
	}
	da.CheckAlive(t)
	db.CheckAlive(t)
}

// runProgress runs a target (daemon a) and an initiator (daemon b) and
// returns the target's result line.
func runProgress(t *testing.T, prov, op string, size, count int, busy time.Duration, da, db *daemontest.Daemon,
	env []string) string {
	t.Helper()
	timeout := daemontest.Scaled(60*time.Second) + busy
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	port := fmt.Sprint(ctrlPort())
	args := []string{"-p", prov, "-o", op, "-s", fmt.Sprint(size), "-b", fmt.Sprint(busy.Milliseconds()), "-P", port}
	if count > 0 {
		args = append(args, "-n", fmt.Sprint(count))
	}
	tgt := exec.CommandContext(ctx, progBin, args...)
	tgt.Env = fiEnv(da, env...)
	var tout strings.Builder
	tgt.Stdout, tgt.Stderr = &tout, &tout
	if err := tgt.Start(); err != nil {
		t.Fatal(err)
	}
	ini := exec.CommandContext(ctx, progBin, append(args, "127.0.0.1")...)
	ini.Env = fiEnv(db, env...)
	iout, ierr := ini.CombinedOutput()
	terr := tgt.Wait()
	if ierr != nil || terr != nil {
		t.Fatalf("fi_progress %s: initiator: %v\n%s\ntarget: %v\n%s", strings.Join(args, " "), ierr, iout, terr,
			tout.String())
	}
	for _, l := range strings.Split(tout.String(), "\n") {
		if strings.HasPrefix(l, "progress ") {
			return l
		}
	}
	t.Fatalf("fi_progress target printed no result:\n%s", tout.String())
	return ""
}
