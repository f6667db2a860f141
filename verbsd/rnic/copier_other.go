//go:build !amd64 && !arm64

package rnic

import "sync/atomic"

// copierOffP: without assembly atomics for this architecture the copier
// thread keeps its P like any goroutine (rnic/copier_thread.go): correct,
// but woken through the scheduler.
const copierOffP = false

func procLoad(p *uint32) uint32     { return atomic.LoadUint32(p) }
func procStore(p *uint32, v uint32) { atomic.StoreUint32(p, v) }
func procPause()                    {}
