package daemontest

import (
	"fmt"
	"net"
	"os"
	"sync/atomic"
	"testing"
)

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
	first, last := b.NextRange()
	return fmt.Sprintf("%d-%d", first, last)
}

// NextRange returns the next block's first and last port (for a daemon
// configured in the test process: config.Config's port ranges).
func (b *Blocks) NextRange() (first, last int) {
	first = b.Base + b.Size*(int(b.next.Add(1)-1)%b.Count)
	return first, first + b.Size - 1
}

// TCPPorts hands out the TCP listening ports of a suite's private block:
// Count ports from Base, below the ephemeral range. A port the kernel
// handed out (listen on :0) and that was closed again may be taken by
// anyone before the test listens on it (other packages' tests, running in
// parallel, connect out of the ephemeral range), so nothing hands out ports
// of the block but Free. The start is spread by PID so that two runs at
// once (two checkouts on one machine) rarely meet, and a port in use is
// skipped.
type TCPPorts struct {
	Base, Count int
	next        atomic.Int32
}

// Free returns a port of the block that was free on every address a moment
// ago (a listener bound it and let it go); it fails the test when none is.
func (p *TCPPorts) Free(t testing.TB) int {
	t.Helper()
	start := os.Getpid() % p.Count
	for range p.Count {
		port := p.Base + (start+int(p.next.Add(1)-1))%p.Count
		l, err := net.Listen("tcp", fmt.Sprintf(":%d", port))
		if err != nil {
			continue
		}
		l.Close()
		return port
	}
	t.Fatalf("no free TCP port in %d-%d", p.Base, p.Base+p.Count-1)
	return 0
}
