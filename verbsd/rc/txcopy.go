package rc

import (
	"unsafe"

	"github.com/iwarpd/iwarpd/verbsd/rnic"
	"golang.org/x/sys/unix"
)

// The MPA CRC of an FPDU (RFC 5044 §4.4) must cover the octets that go on
// the wire. rc/tx.go writes FPDUs with writev straight from registered
// memory; the kernel copies the octets when writev runs, after the CRC was
// computed. Registered memory may change in between: its owner's CPU
// atomics on a word a peer reads (t_fi_atomic's counter), a Read of a
// buffer being written locally, a Send buffer reused early. A change in
// that window sent an FPDU whose CRC did not match, and the peer ended
// the connection (Terminate, MPA CRC error). The data of such
// a transfer is undefined (it is whatever the memory held), but the
// connection must survive it, as with a hardware RNIC, which checksums
// the octets it has fetched.
//
// So with the CRC on, each FPDU of a batch is built whole (framing and
// payload) in the connection's bounce buffer, the payload copied once,
// and the CRC and writev both use that copy. A batch cut by a short write resumes from the copy of the
// FPDU it cut (keepCut), never from registered memory again: the rest
// of that FPDU matches the part already sent and its CRC. Without the
// CRC nothing checks the octets, and the FPDUs stay zero-copy.

// appendCopied appends one FPDU carrying ulp (its DDP/RDMAP header,
// daemon memory, then its payload slices) to the batch as a single slice
// of t.bounce: mpa.Sender.AppendFPDU copies the payload there once, frames
// it (length, markers, PAD) and checksums the contiguous octets, the same
// octets AppendVec gives (mpa.TestAppendVecMatchesAppendFPDU). The FPDUs of
// a batch are thus adjacent in bounce, and writev hands them to the
// kernel as one iovec: a batch of 32 small Sends is one iovec, not 128
// (length, header, payload, PAD+CRC each). Slices of an earlier bounce
// array stay valid when append moves it.
func (t *tx) appendCopied(c *conn, ulp [][]byte) {
	start := len(t.bounce)
	t.bounce = c.snd.AppendFPDU(t.bounce, ulp...)
	end := len(t.bounce)
	t.vec = append(t.vec, t.bounce[start:end:end])
}

// keepCut keeps, of the batch a short write cut (t.ndone FPDUs written
// whole, t.written octets of the next), only that next FPDU, as built:
// the batch resumes from it without a rebuild (t.owned), and the FPDUs
// after it are built again when it is out.
func (t *tx) keepCut(c *conn) {
	i := t.ndone
	from := 0
	if i > 0 {
		from = t.vecEnds[i-1]
	}
	n := copy(t.vec, t.vec[from:t.vecEnds[i]])
	t.vec = t.vec[:n]
	t.vecEnds = append(t.vecEnds[:0], n)
	w := t.wires[i]
	t.wires = append(t.wires[:0], w)
	t.wire = w
	t.owned = true
	c.snd.SetStreamPos(t.startPos + uint64(w))
}

// iovecs appends to iov the iovecs of vec less its first skip octets.
// Slices that follow each other in memory (the FPDUs appendCopied built
// one after another in the bounce buffer) become one iovec: the same
// octets in the same order, and the kernel copies them in one piece.
func iovecs(iov []unix.Iovec, vec [][]byte, skip int) []unix.Iovec {
	for _, p := range vec {
		if skip >= len(p) {
			skip -= len(p)
			continue
		}
		p, skip = p[skip:], 0
		if n := len(iov); n > 0 &&
			uintptr(unsafe.Pointer(iov[n-1].Base))+uintptr(iov[n-1].Len) == uintptr(unsafe.Pointer(unsafe.SliceData(p))) {
			iov[n-1].Len += uint64(len(p))
			continue
		}
		iov = rnic.AppendIovecs(iov, p)
	}
	return iov
}
