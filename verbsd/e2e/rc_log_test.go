package e2e

import (
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/iwarpd/iwarpd/proto"
	"github.com/iwarpd/iwarpd/verbsd/config"
)

// logLines is a Logger that keeps the Info lines.
type logLines struct {
	mu    sync.Mutex
	lines []string
}

func (l *logLines) Infof(format string, args ...any) {
	l.mu.Lock()
	l.lines = append(l.lines, fmt.Sprintf(format, args...))
	l.mu.Unlock()
}
func (l *logLines) Warnf(format string, args ...any) { l.Infof(format, args...) }
func (l *logLines) Debugf(string, ...any)            {}

// wait returns the first line holding every one of want (bounded by rcWait).
func (l *logLines) wait(t *testing.T, want ...string) string {
	t.Helper()
	deadline := time.Now().Add(rcWait)
	for time.Now().Before(deadline) {
		l.mu.Lock()
		for _, s := range l.lines {
			ok := true
			for _, w := range want {
				ok = ok && strings.Contains(s, w)
			}
			if ok {
				l.mu.Unlock()
				return s
			}
		}
		l.mu.Unlock()
		time.Sleep(time.Millisecond)
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	t.Fatalf("no log line with %q; lines:\n%s", want, strings.Join(l.lines, "\n"))
	return ""
}

// TestRCLogsWhyQPErrors: the end of an RC connection is logged at info on
// both sides, with the cause as each side saw it and the Terminate
// (never a flushed QP and nothing in the log).
func TestRCLogsWhyQPErrors(t *testing.T) {
	var log logLines
	srv, path := rcServer(t, func(c *config.Config) { c.Log = &log })
	a := newRCEnd(t, srv, path, rcOpts{bufSize: 1 << 16})
	b := newRCEnd(t, srv, path, rcOpts{bufSize: 1 << 16})
	pi, pr := rcParams(true, false, 4, 4)
	connectRC(t, a, b, pi, pr, 0)
	b.postRecv(7, b.mr.SGE(0, 64))
	a.modify(proto.QPStateError) // a's client moves its QP to ERROR
	b.waitState(proto.QPStateError)
	a.waitState(proto.QPStateError)
	la := log.wait(t, fmt.Sprintf("RC QP %d (QPN %d, initiator", a.qp, a.qpn), "QP in ERROR",
		"moved to ERROR locally (the client moved it to ERROR (modify-qp))", "Terminate rdmap")
	lb := log.wait(t, fmt.Sprintf("RC QP %d (QPN %d, responder", b.qp, b.qpn), "QP in ERROR",
		"the peer sent a Terminate: rdmap")
	t.Logf("initiator: %s\nresponder: %s", la, lb)
	if c := b.waitCQEs(b.rcq, 1, "b's flushed receive")[0]; c.Status != proto.WCWRFlushErr || c.WRID != 7 {
		t.Fatalf("b's receive: %+v", c)
	}
}
