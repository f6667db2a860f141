package rc

import (
	"io"
	"sync"

	"github.com/iwarpd/iwarpd/verbsd/rnic"
	"golang.org/x/sys/unix"
)

// RC receive batching: the reader under mpa.Receiver (rc/rx.go) reads
// what the socket holds, up to rxBufSize octets, with one readv, and
// serves the FPDUs in it — their lengths, headers, payloads, PAD and CRC
// (RFC 5044 §4; markers, §5, are stripped by mpa.Receiver on top of this
// reader) — from that buffer, so a burst of small FPDUs costs one system
// call instead of one or two per FPDU. An FPDU cut by the end of a read is
// carried over: mpa.Receiver and the FPDU state in rx are resumable at
// any octet, and what stays buffered is served first by the next read.
//
// Large payloads are still read in place. The reader reads ahead a whole
// buffer only while the stream carries small FPDUs: after rxSmallRun
// FPDUs in a row whose ULPDUs are shorter than rxDirect (observe). Once
// an FPDU is that large, each readv brings in only readAhead octets
// beyond what is asked for (the FPDU's trailer, the next FPDU's length and
// headers), so a large payload is read with its destination in registered
// memory first in the iovecs, not into the buffer and copied from it:
// reading ahead whole buffers cut a 64 KiB Send stream's goodput by a
// quarter and raised its CPU per message (docs/benchmarks.md, "RC receive
// batching"). A 64 KiB message is one large FPDU and a short one on
// loopback, hence the run of small FPDUs before reading ahead again.
//
// The buffer is taken from a pool for a read and given back as soon as it
// is empty, so a connection holds one only while it has octets read and
// not yet processed (the receive loop stops after PollBatch FPDUs; the
// engine serves the QP again before it sleeps: see pending and hasWork).
// An idle connection holds none (memory per peer, docs/memory.md).

// rxBufSize is the most octets one readv of an RC socket brings in
// beyond the destination of a large payload: 64 KiB, the largest TCP
// segment (loopback's, or a GRO'd one) and about 740 FPDUs of 64-octet
// Sends; PollBatch FPDUs are processed per pass, the rest waits in the
// buffer for the next pass.
const rxBufSize = 64 << 10

// rxDirect: an FPDU whose ULPDU has at least this many octets is
// large: its payload is read in place, with a look-ahead of readAhead
// octets only. Below it the payload still lands in place when nothing is
// buffered (it comes first in the iovecs), and the FPDUs read behind it
// are copied from the buffer.
const rxDirect = 8 << 10

// rxSmallRun small FPDUs in a row switch whole-buffer reads back on.
const rxSmallRun = 4

// readAhead is the look-ahead while the stream carries large FPDUs: the
// trailer of an FPDU (PAD, CRC), the next one's length and headers.
const readAhead = 256

// rxPool holds the receive buffers of the RC connections that have none
// (every engine takes from it; a buffer is only ever used by one engine at
// a time).
var rxPool = sync.Pool{New: func() any { return new([rxBufSize]byte) }}

// reader reads a non-blocking socket for mpa.Receiver in as few system
// calls as the data allows (see above). What is buffered must be consumed
// before the engine sleeps (epoll does not see it): see pending and
// serviceRC.
type reader struct {
	fd    int
	r, w  int
	buf   *[rxBufSize]byte // held while r < w; nil otherwise
	iov   []unix.Iovec
	calls int64 // readv calls made, for the recv_calls counter (takeCalls)
	small int   // FPDUs in a row with ULPDUs shorter than rxDirect (observe)
	// dry: the last whole-buffer readv brought in less than it asked
	// for, so the socket held nothing more then; until rearm, an empty
	// buffer answers EAGAIN without another readv (see rearm).
	dry bool
}

// rearm lets the next Read call readv again. The receive loop calls it
// when it starts (rc/rx.go receive): within one pass, a whole-buffer
// readv that came back short means the next one would most likely find
// the socket empty (EAGAIN, a system call for nothing: about one per
// batch of small FPDUs before). Octets that arrive after it are not lost: the socket is
// registered level-triggered (EPOLLIN), so the engine's next epoll_wait
// marks the QP readable again and the next pass reads them.
func (x *reader) rearm() { x.dry = false }

// observe notes the ULPDU_Length of the FPDU now being received.
func (x *reader) observe(ulen int) {
	if ulen >= rxDirect {
		x.small = 0
	} else if x.small < rxSmallRun {
		x.small++
	}
}

// pending reports octets read from the socket and not yet consumed.
func (x *reader) pending() bool { return x.r < x.w }

// reset drops what is buffered.
func (x *reader) reset() {
	x.r, x.w, x.dry = 0, 0, false
	x.release()
}

// release gives the empty buffer back to the pool.
func (x *reader) release() {
	if x.buf != nil {
		rxPool.Put(x.buf)
		x.buf = nil
	}
}

// takeCalls returns the readv calls made since the last take.
func (x *reader) takeCalls() int64 {
	n := x.calls
	x.calls = 0
	return n
}

// Read serves b from the buffer, or, when it is empty, reads the socket
// into b and the buffer behind it with one readv.
func (x *reader) Read(b []byte) (int, error) {
	if x.r < x.w {
		n := copy(b, x.buf[x.r:x.w])
		x.r += n
		if x.r == x.w {
			x.r, x.w = 0, 0
			x.release()
		}
		return n, nil
	}
	x.r, x.w = 0, 0
	if len(b) == 0 {
		return 0, nil
	}
	if x.dry {
		return 0, unix.EAGAIN
	}
	if x.buf == nil {
		x.buf = rxPool.Get().(*[rxBufSize]byte)
	}
	ahead := x.buf[:readAhead]
	if x.small >= rxSmallRun && len(b) < rxDirect {
		ahead = x.buf[:]
	}
	// RawReadv: b is registered memory or the connection's header buffers.
	x.iov = rnic.AppendIovecs(x.iov[:0], b, ahead)
	for {
		n, err := rnic.RawReadv(x.fd, x.iov)
		x.calls++
		if err == unix.EINTR {
			continue
		}
		clear(x.iov)
		// Only whole-buffer reads (small FPDUs) count: a large payload
		// read in place arrives in pieces, and the next readv finds more.
		x.dry = err == nil && len(ahead) == rxBufSize && n < len(b)+len(ahead)
		if n > len(b) {
			x.w = n - len(b)
			return len(b), nil
		}
		x.release()
		if err != nil {
			return 0, err
		}
		if n == 0 {
			return 0, io.EOF
		}
		return n, nil
	}
}

// RxState is what a connection's receive side holds, for tests and
// inspection: the MPA stream position of the next octet to parse, octets
// read from the socket and not yet parsed, and whether it holds a pooled
// receive buffer.
type RxState struct {
	StreamPos   uint64
	Buffered    int
	HoldsBuffer bool
}

// RxState reports q's receive side (inside a command; zero if q is not
// connected).
func (q *QP) RxState() RxState {
	c := q.Conn
	if c == nil {
		return RxState{}
	}
	rd := &c.rx.rd
	return RxState{StreamPos: c.rcv.StreamPos(), Buffered: rd.w - rd.r, HoldsBuffer: rd.buf != nil}
}
