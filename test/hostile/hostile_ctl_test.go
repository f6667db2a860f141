package hostile

import (
	"os"
	"strings"
	"testing"
	"time"

	"github.com/iwarpd/iwarpd/ofverbs"
	"github.com/iwarpd/iwarpd/test/daemontest"
)

// Issue 13, point 11: iwarpctl prints client-chosen names escaped, and
// says "permission denied" (exit 4) when the socket refuses the user.

func init() { helpers["evil-name"] = helperEvilName }

// evilName would clear the screen and forge a session row if printed raw.
const evilName = "\x1b[2J\x1b[Hevil\n999\t0\t0\t0\tforged"

func helperEvilName() int {
	if _, err := ofverbs.Open(ofverbs.WithSocket(os.Getenv(envSock)), ofverbs.WithClientName(evilName)); err != nil {
		return helperFail("open: %v", err)
	}
	helperReady()
	time.Sleep(helperLifetime())
	return 0
}

func TestCtlHostileNames(t *testing.T) {
	d := daemontest.Start(t, "ctl", daemontest.Options{Ports: nextPorts()})
	by := startBystander(t, d)
	spawnHostile(t, "evil-name", d.Sock, "")
	out, code := ctl(t, d.Sock, "sessions")
	if code != 0 {
		t.Fatalf("iwarpctl sessions: exit %d: %s", code, out)
	}
	if strings.Contains(out, "\x1b") {
		t.Errorf("iwarpctl printed a terminal escape from a client name:\n%q", out)
	}
	for _, l := range strings.Split(out, "\n") {
		if strings.HasPrefix(l, "999") {
			t.Errorf("a client name forged a row: %q", l)
		}
	}
	by.progressed(t, "hostile names")
}

func TestCtlPermissionDenied(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root to run iwarpctl as another user")
	}
	d := daemontest.Start(t, "ctl-perm", daemontest.Options{Ports: nextPorts(), Extra: []string{"-socket-mode", "0600"}})
	openSocket(t, d)
	ctlBin := accessibleCopy(t, daemontest.Bins["iwarpctl"])
	cmd, out := runAs(t, otherUID, nil, ctlBin, "-socket", d.Sock)
	err := cmd.Run()
	if cmd.ProcessState == nil || cmd.ProcessState.ExitCode() != 4 || !strings.Contains(out.String(), "permission denied") {
		t.Errorf("iwarpctl as uid %d on a 0600 socket: %v: %s; want exit 4 and \"permission denied\"", otherUID, err, out)
	}
}
