package rc

// The MPA CRC of an FPDU (RFC 5044 §4.4) must cover the octets that go on
// the wire. rc/tx.go writes FPDUs with writev straight from registered
// memory; the kernel copies the octets when writev runs, after the CRC was
// computed. Registered memory may change in between: its owner's CPU
// atomics on a word a peer reads (t_fi_atomic's counter), a Read of a
// buffer being written locally, a Send buffer reused early. A change in
// that window sent an FPDU whose CRC did not match, and the peer ended
// the connection (Terminate, MPA CRC error; issue 11). The data of such
// a transfer is undefined (it is whatever the memory held), but the
// connection must survive it, as with a hardware RNIC, which checksums
// the octets it has fetched.
//
// So with the CRC on, the payload of each FPDU of a batch is copied once
// into the connection's bounce buffer, and the CRC and writev both use
// that copy. A batch cut by a short write resumes from the copy of the
// FPDU it cut (rcKeepCut), never from registered memory again: the rest
// of that FPDU matches the part already sent and its CRC. Without the
// CRC nothing checks the octets, and the FPDUs stay zero-copy.

// rcCopyBatch replaces the payload slices of one FPDU's ULPDU (ulp[0] is
// its DDP/RDMAP header, daemon memory) by one copy of them in t.bounce.
// Slices of an earlier bounce array stay valid when append moves it.
func (t *rcTx) rcCopyBatch(ulp [][]byte) [][]byte {
	if len(ulp) < 2 {
		return ulp
	}
	start := len(t.bounce)
	for _, p := range ulp[1:] {
		t.bounce = append(t.bounce, p...)
	}
	end := len(t.bounce)
	return append(ulp[:1], t.bounce[start:end:end])
}

// rcKeepCut keeps, of the batch a short write cut (t.ndone FPDUs written
// whole, t.written octets of the next), only that next FPDU, as built:
// the batch resumes from it without a rebuild (t.owned), and the FPDUs
// after it are built again when it is out.
func (t *rcTx) rcKeepCut(c *rcConn) {
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
