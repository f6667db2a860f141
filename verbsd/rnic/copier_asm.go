//go:build amd64 || arm64

package rnic

// copierOffP: the copier thread runs without a P (rnic/copier_thread.go);
// its atomics are the assembly of copier_$GOARCH.s.
const copierOffP = true

// procLoad loads *p (acquire).
//
//go:noescape
func procLoad(p *uint32) uint32

// procStore stores v at *p (release, and ordered before later loads).
//
//go:noescape
func procStore(p *uint32, v uint32)

// procPause is the CPU's spin-wait hint (PAUSE, YIELD).
func procPause()
