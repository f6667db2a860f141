package daemontest

import (
	"bytes"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// Scaled multiplies d by IWARPD_TEST_TIMEOUT_SCALE (default 1), for slow or
// loaded machines. Every limit scaled with it only bounds a wait.
func Scaled(d time.Duration) time.Duration {
	if f, err := strconv.ParseFloat(os.Getenv("IWARPD_TEST_TIMEOUT_SCALE"), 64); err == nil && f > 0 {
		return time.Duration(float64(d) * f)
	}
	return d
}

// CleanEnv is the environment without IWARPD_* settings, so that only
// flags configure a daemon.
func CleanEnv() []string {
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "IWARPD_") {
			env = append(env, kv)
		}
	}
	return env
}

// Buffer collects a child's output; safe to read while the child writes.
type Buffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *Buffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *Buffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// Blocks hands out a suite's private port ranges in turn: Count blocks of
// Size ports from Base, then the first again (a daemon skips a port that
// another process holds). Blocks must lie below Linux's ephemeral range
// (doc.go).
type Blocks struct {
	Base, Size, Count int
	next              atomic.Int32
}

// Next returns the next block as "first-last", the form of -ud-ports and
// -rd-ports.
func (b *Blocks) Next() string {
	first := b.Base + b.Size*(int(b.next.Add(1)-1)%b.Count)
	return fmt.Sprintf("%d-%d", first, first+b.Size-1)
}

// Eventually polls cond (bounded in count and time) until it holds.
func Eventually(t testing.TB, what string, timeout time.Duration, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(Scaled(timeout))
	for i := 0; i < 100000; i++ {
		if cond() {
			return
		}
		if time.Now().After(deadline) {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Fatalf("timed out after %v waiting for %s", Scaled(timeout), what)
}
