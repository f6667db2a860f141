package libfabric

import (
	"context"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/iwarpd/iwarpd/test/daemontest"
)

// TestRefusedRegistrationSaysWhy runs c/prov/tests/fi_mr_limit.c (ASan and
// UBSan) against a daemon with -max-registered-bytes 4M and
// -user-max-registered-bytes 5M: a registration beyond the session's limit
// and one beyond the user's fail fi_mr_reg with -FI_ENOMEM, and both the
// provider (FI_LOG_LEVEL=warn) and the daemon's log (at warn) say which
// limit refused it, what was in use and the flag that raises it (issue 19,
// item 8: fabtests' fi_rdm_atomic got "Unspecified error" and the daemon's
// log said nothing). The two messages are the same text. The domains
// stage nothing (FI_IWARPD_STAGING=0), so the test's MRs are all there is.
func TestRefusedRegistrationSaysWhy(t *testing.T) {
	needProvider(t)
	const name = "fi_mr_limit"
	bin := buildProvProgram(t, name)
	d := daemon(t, name, daemontest.Options{Extra: []string{"-max-registered-bytes", "4M", "-max-mr-size", "4M",
		"-user-max-registered-bytes", "5M"}})
	ctx, cancel := context.WithTimeout(context.Background(), daemontest.Scaled(time.Minute))
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, "iwarpd")
	cmd.Env = fiEnv(d, append([]string{"ASAN_OPTIONS=detect_leaks=0", "FI_LOG_LEVEL=warn",
		"FI_IWARPD_STAGING=0"}, native...)...)
	out, err := cmd.CombinedOutput()
	if err != nil || !strings.Contains(string(out), name+": ok") {
		t.Fatalf("%s: %v\n%s", name, err, out)
	}
	// What the daemon answered (3 MiB held in one MR, 2 MiB more asked; the
	// user: 3 MiB held, 3 MiB more asked), and the flags.
	reasons := []struct{ flag, reason string }{
		{"max-registered-bytes", "the daemon's limit of 4194304 registered octets per session is reached " +
			"(3145728 held in 1 memory regions, 2097152 more asked); raise it with -max-registered-bytes (docs/iwarpd.md)"},
		{"user-max-registered-bytes", "the daemon's limit of 5242880 registered octets per user is reached " +
			"(3145728 held, 3145728 more asked); raise it with -user-max-registered-bytes"},
	}
	var provLines []string
	for _, l := range strings.Split(string(out), "\n") {
		if strings.Contains(l, "<warn>") && strings.Contains(l, "fi_mr_reg of") {
			provLines = append(provLines, l)
		}
	}
	dlog := d.Stderr.String()
	var daemonLines []string
	for _, l := range strings.Split(dlog, "\n") {
		if strings.Contains(l, "level=warn") && strings.Contains(l, "refused by the limit") {
			daemonLines = append(daemonLines, l)
		}
	}
	if len(provLines) != 2 || len(daemonLines) != 2 {
		t.Errorf("want 2 refusals said by the provider and by the daemon, got %d and %d:\n%s\ndaemon:\n%s",
			len(provLines), len(daemonLines), strings.Join(provLines, "\n"), strings.Join(daemonLines, "\n"))
	}
	for i, r := range reasons {
		if i < len(provLines) && (!strings.Contains(provLines[i], r.reason) || !strings.Contains(provLines[i], "Cannot allocate memory")) {
			t.Errorf("provider's warning %d: %s\nwant the reason %q and -FI_ENOMEM", i+1, provLines[i], r.reason)
		}
		if i < len(daemonLines) && (!strings.Contains(daemonLines[i], "refused by the limit -"+r.flag+":") ||
			!strings.Contains(daemonLines[i], r.reason) || !strings.Contains(daemonLines[i], `client \"`+name+`\"`)) {
			t.Errorf("daemon's warning %d: %s\nwant the limit -%s, the client and the reason %q", i+1, daemonLines[i], r.flag, r.reason)
		}
	}
	t.Logf("provider:\n%s\ndaemon:\n%s", strings.Join(provLines, "\n"), strings.Join(daemonLines, "\n"))
	d.CheckAlive(t)
}
