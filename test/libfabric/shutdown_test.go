package libfabric

import (
	"context"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/iwarpd/iwarpd/test/daemontest"
)

// TestShutdownAfterCompletions runs c/prov/tests/fi_shutdown.c (built here
// with ASan and UBSan) against a real daemon: when the peer of an FI_EP_MSG
// connection sends messages and then ends the connection (fi_close, an
// abort; fi_shutdown, graceful), the receiver's FI_SHUTDOWN is read only
// after those messages' completions, a connection request behind it is not
// held up, and closing the endpoint on FI_SHUTDOWN then loses nothing.
// ofi_rxm closes on FI_SHUTDOWN; before, it lost fi_pingpong's last message
// when the event came first, and the client waited forever (issue 10).
func TestShutdownAfterCompletions(t *testing.T) {
	needProvider(t)
	bin := buildProvProgram(t, "fi_shutdown")
	d := daemon(t, "shutdown", daemontest.Options{})
	ctx, cancel := context.WithTimeout(context.Background(), daemontest.Scaled(120*time.Second))
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, "iwarpd")
	// Leaks of libfabric itself are not ours to judge here.
	cmd.Env = fiEnv(d, append([]string{"ASAN_OPTIONS=detect_leaks=0",
		"IWARPD_TEST_TIMEOUT_SCALE=" + os.Getenv("IWARPD_TEST_TIMEOUT_SCALE")}, native...)...)
	out, err := cmd.CombinedOutput()
	if err != nil || !strings.Contains(string(out), "fi_shutdown: ok") {
		t.Fatalf("fi_shutdown: %v\n%s", err, out)
	}
	t.Log(strings.TrimSpace(string(out)))
	d.CheckAlive(t)
}

// TestConnectedBeforeShutdown runs c/prov/tests/fi_cm_race.c (ASan+UBSan):
// a raw MPA responder that accepts with private data and closes the
// connection at once, 100 times; the provider's active MSG endpoint must
// read FI_CONNECTED with the accept data, then FI_SHUTDOWN, every time.
// The daemon queued the connection's end from its engine and its start
// from the connecting goroutine, and the end now and then came first:
// fabtests' fi_cm_data read FI_SHUTDOWN where it wanted FI_CONNECTED with
// the data (issue 19).
func TestConnectedBeforeShutdown(t *testing.T) {
	runProvProgram(t, "fi_cm_race")
}
