package daemontest

import (
	"bytes"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/iwarpd/iwarpd/internal/testwait"
)

// Scaled multiplies d by IWARPD_TEST_TIMEOUT_SCALE (default 1), for slow or
// loaded machines (internal/testwait). Every limit scaled with it only
// bounds a wait.
func Scaled(d time.Duration) time.Duration { return testwait.Scaled(d) }

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
