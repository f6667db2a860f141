package hostile

import (
	"errors"
	"fmt"
	"os"
	"strings"
	"testing"

	"github.com/iwarpd/iwarpd/ofverbs"
	"github.com/iwarpd/iwarpd/test/daemontest"
	"golang.org/x/sys/unix"
)

// Issue 13, point 10: a root daemon binds for an unprivileged client only
// ports in the configured ranges, on the address it serves, and never a
// privileged port the client could not bind itself.

// Fixed ports of this file (inside the suite's 27500-27599): RC listeners.
const bindListenPort = 27550

func init() {
	helpers["priv-listen"] = helperPrivListen
	helpers["priv-ud"] = helperPrivUD
}

// expectErrno checks err against want and describes a mismatch.
func expectErrno(what string, err error, want unix.Errno) string {
	if errors.Is(err, want) {
		return ""
	}
	return fmt.Sprintf("%s: %v, want %v; ", what, err, want)
}

// helperPrivListen (an unprivileged uid) asks for listeners the daemon
// must refuse, and one it must grant; it says "ok" or what went wrong.
func helperPrivListen() int {
	c, err := ofverbs.Open(ofverbs.WithSocket(os.Getenv(envSock)), ofverbs.WithClientName("priv-listen"))
	if err != nil {
		return helperFail("open: %v", err)
	}
	var bad strings.Builder
	_, err = c.Listen(":81")
	bad.WriteString(expectErrno("listen :81", err, unix.EACCES))
	_, err = c.Listen(fmt.Sprintf("0.0.0.0:%d", bindListenPort))
	bad.WriteString(expectErrno("listen on an address the daemon does not serve", err, unix.EADDRNOTAVAIL))
	if l, err := c.Listen(fmt.Sprintf(":%d", bindListenPort)); err != nil {
		fmt.Fprintf(&bad, "listen :%d (allowed): %v; ", bindListenPort, err)
	} else {
		l.Close()
	}
	if bad.Len() == 0 {
		helperReady("ok")
	} else {
		helperReady(bad.String())
	}
	return 0
}

// helperPrivUD (an unprivileged uid) asks a daemon whose UD range is
// privileged (argument: its first port) for UD QPs: refused.
func helperPrivUD() int {
	c, err := ofverbs.Open(ofverbs.WithSocket(os.Getenv(envSock)), ofverbs.WithClientName("priv-ud"))
	if err != nil {
		return helperFail("open: %v", err)
	}
	var first uint16
	fmt.Sscan(os.Getenv(envArg), &first)
	pd, err := c.AllocPD()
	if err != nil {
		return helperFail("alloc PD: %v", err)
	}
	cq, err := c.CreateCQ(4, nil)
	if err != nil {
		return helperFail("create CQ: %v", err)
	}
	var bad strings.Builder
	for _, port := range []uint16{first, 0} {
		q, err := pd.CreateQP(ofverbs.QPInitAttr{Type: ofverbs.QPTypeUD, SendCQ: cq, RecvCQ: cq, Port: port,
			Cap: ofverbs.QPCap{MaxSendWR: 1, MaxRecvWR: 1, MaxSendSGE: 1, MaxRecvSGE: 1}})
		if err == nil {
			fmt.Fprintf(&bad, "UD QP with port %d: got %v; ", port, q.Addr())
		}
	}
	if bad.Len() == 0 {
		helperReady("ok")
	} else {
		helperReady(bad.String())
	}
	return 0
}

// TestPrivilegedBinds: a root daemon, a client of uid 1001.
func TestPrivilegedBinds(t *testing.T) {
	d := daemontest.Start(t, "bind", daemontest.Options{Ports: nextPorts(), Extra: []string{"-socket-mode", "0666"}})
	openSocket(t, d)
	by := startBystander(t, d)
	p := spawnHostileAs(t, otherUID, "priv-listen", d.Sock, "")
	if p.info != "ok" {
		t.Errorf("uid %d: %s", otherUID, p.info)
	}
	by.progressed(t, "privileged listens")

	// A UD range below 1024 (an operator's choice): root's client gets a
	// port, uid 1001's does not.
	const low = 1000
	d2 := daemontest.Start(t, "bind-low", daemontest.Options{Ports: fmt.Sprintf("%d-%d", low, low+1), Extra: []string{"-socket-mode", "0666"}})
	openSocket(t, d2)
	p2 := spawnHostileAs(t, otherUID, "priv-ud", d2.Sock, fmt.Sprint(low))
	if p2.info != "ok" {
		t.Errorf("uid %d: %s", otherUID, p2.info)
	}
	c := d2.Open(t, "root")
	pd, err := c.AllocPD()
	if err != nil {
		t.Fatal(err)
	}
	cq, err := c.CreateCQ(4, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := pd.CreateQP(ofverbs.QPInitAttr{Type: ofverbs.QPTypeUD, SendCQ: cq, RecvCQ: cq, Port: low,
		Cap: ofverbs.QPCap{MaxSendWR: 1, MaxRecvWR: 1, MaxSendSGE: 1, MaxRecvSGE: 1}}); err != nil {
		t.Errorf("root's UD QP on port %d: %v", low, err)
	}
}
