package rnic

import (
	"math/bits"
	"sync"
	"unsafe"

	"github.com/iwarpd/iwarpd/proto"
)

// Staging of process memory (rnic/procmem.go). Every data path of the engine
// works on the daemon's view of registered octets, a []byte good for the
// current service of one QP (translate, LookupRemote: "for this pass only").
// For a memfd MR that view is the mapping itself (zero copy). For a
// process MR it is a staging buffer:
//
//   - a source (translate with write false, LookupRemote for remote read) is
//     read from the process at once (pread of /proc/PID/mem on the session's copier) — the data path
//     then sends from the staging buffer as from a mapping;
//   - a destination (translate with write true, LookupRemote for remote write)
//     is a staging buffer the data path places into; every place that
//     writes into a destination then calls commit (or CommitOne) for the
//     octets it wrote, which writes them to the process
//     (pwrite, likewise) before the completion that makes them visible.
//     Only octets actually placed are written back, never the rest of a
//     posted buffer (two receives may share memory, verbs allows it).
//
// commit finds the staging buffer a slice lies in by address: data paths
// keep passing sub-slices of what translate returned (AppendRange,
// pieceAt). Mapped memory is not staged, so for it commit is a no-op (a
// length check when nothing is staged).
//
// Staging buffers come from a pool per session (so that one session's
// octets never end up in another's buffer) and return to it when the
// engine finishes serving the QP (engine.pass: releaseStaged).

// stagedBuf is one staging buffer taken for the QP being served.
type stagedBuf struct {
	r    *ProcRegion
	off  uint64 // offset of buf[0] in the region
	buf  []byte // the staged octets
	full []byte // the pool buffer buf lies in
	s    *Session
}

// Staging pool bounds per session: size classes 4 KiB .. 16 MiB (powers of
// two), at most stagePoolPerClass free buffers of a class (a UD look-ahead
// translates up to 64 receives per pass) and
// stagePoolBytes in all.
const (
	stageMinShift     = 12
	stageClasses      = 13
	stagePoolPerClass = 64
	stagePoolBytes    = 16 << 20
)

// stagePool is a session's free staging buffers (engine-owned).
type stagePool struct {
	// mu: engines serving QPs of one session share its pool (rnic/engines.go).
	mu    sync.Mutex
	free  [stageClasses][][]byte
	bytes int
}

func stageClass(n int) int {
	if n <= 1<<stageMinShift {
		return 0
	}
	return bits.Len(uint(n-1)) - stageMinShift
}

// get returns a buffer of at least n octets (its contents are this
// session's old data, or zeros).
func (p *stagePool) get(n int) []byte {
	p.mu.Lock()
	defer p.mu.Unlock()
	c := stageClass(n)
	if c >= stageClasses {
		return make([]byte, n)
	}
	if k := len(p.free[c]); k > 0 {
		b := p.free[c][k-1]
		p.free[c] = p.free[c][:k-1]
		p.bytes -= cap(b)
		return b
	}
	return make([]byte, 1<<(c+stageMinShift))
}

// put keeps b for reuse, within the pool's bounds.
func (p *stagePool) put(b []byte) {
	p.mu.Lock()
	defer p.mu.Unlock()
	c := stageClass(cap(b))
	if c >= stageClasses || cap(b) != 1<<(c+stageMinShift) || len(p.free[c]) >= stagePoolPerClass ||
		p.bytes+cap(b) > stagePoolBytes {
		return
	}
	p.free[c] = append(p.free[c], b[:cap(b)])
	p.bytes += cap(b)
}

// stagePut returns b to s's pool, unless s's process memory stalled
// (rnic/copier.go): the copy that ran past the bound may still use its
// buffer, which is then left to it.
func (s *Session) stagePut(b []byte) {
	if !s.Mem.Stalled() {
		s.stage.put(b)
	}
}

// stage returns the staging view of octets [off, off+n) of process region
// r of session s, read from the process when fill is set (a source).
// WCLocProtErr: the memory cannot be read (unmapped, the process exited).
func (e *Engine) stage(s *Session, r *ProcRegion, off, n uint64, fill bool) ([]byte, proto.WCStatus) {
	if n == 0 {
		return []byte{}, proto.WCSuccess
	}
	full := s.stage.get(int(n))
	b := full[:n:n]
	e.Count(nil, cProcessMemStaged, int64(n))
	if fill {
		if err := r.ReadAt(b, off); err != nil {
			s.stagePut(full)
			e.Count(nil, cProcessMemFaults, 1)
			return nil, proto.WCLocProtErr
		}
		e.Count(nil, cProcessMemRead, int64(n))
	}
	e.staged = append(e.staged, stagedBuf{r: r, off: off, buf: b, full: full, s: s})
	return b, proto.WCSuccess
}

// releaseStaged returns the staging buffers of the QP just served to their
// sessions' pools.
func (e *Engine) releaseStaged() {
	for i := range e.staged {
		st := &e.staged[i]
		if st.s.Installed {
			st.s.stagePut(st.full)
		}
		*st = stagedBuf{}
	}
	e.staged = e.staged[:0]
}

// Unstage returns the staging buffers that pieces were translated to in
// this pass (sources the data path is done with: nothing to commit) to
// their sessions' pools before the pass ends, so that a message sent in
// windows (txPayloads) holds one window's staging at a time. Pieces of
// mapped memory are not staged and are left alone. A piece must come from
// this pass: a buffer released at the end of an earlier one may be staged
// again now for something else.
func (e *Engine) Unstage(pieces [][]byte) {
	for _, p := range pieces {
		if len(p) == 0 {
			continue
		}
		for i := range e.staged {
			st := &e.staged[i]
			if len(st.buf) == len(p) && &st.buf[0] == &p[0] {
				if st.s.Installed {
					st.s.stagePut(st.full)
				}
				last := len(e.staged) - 1
				e.staged[i] = e.staged[last]
				e.staged[last] = stagedBuf{}
				e.staged = e.staged[:last]
				break
			}
		}
	}
}

// Commit writes octets [off, off+n) of the concatenation of pieces that lie
// in staging buffers to their processes (see above). An error (EFAULT: the
// memory went away) means the octets did not reach the process.
func (e *Engine) Commit(pieces [][]byte, off, n int) error {
	if len(e.staged) == 0 {
		return nil
	}
	for _, p := range pieces {
		if n <= 0 {
			break
		}
		if off >= len(p) {
			off -= len(p)
			continue
		}
		k := min(len(p)-off, n)
		if err := e.CommitOne(p[off : off+k]); err != nil {
			return err
		}
		n -= k
		off = 0
	}
	return nil
}

// CommitOne is commit of one slice.
func (e *Engine) CommitOne(b []byte) error {
	if len(e.staged) == 0 || len(b) == 0 {
		return nil
	}
	p := uintptr(unsafe.Pointer(&b[0]))
	for i := range e.staged {
		st := &e.staged[i]
		if len(st.buf) == 0 {
			continue
		}
		base := uintptr(unsafe.Pointer(&st.buf[0]))
		if p >= base && p+uintptr(len(b)) <= base+uintptr(len(st.buf)) {
			if err := st.r.WriteAt(b, st.off+uint64(p-base)); err != nil {
				e.Count(nil, cProcessMemFaults, 1)
				return err
			}
			e.Count(nil, cProcessMemWritten, int64(len(b)))
			return nil
		}
	}
	return nil // mapped memory: already in place
}
