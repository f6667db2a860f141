package rc

import (
	"bytes"
	"fmt"
	"io"
	"os"
	"testing"

	"github.com/iwarpd/iwarpd/mpa"
	"github.com/iwarpd/iwarpd/verbsd/rnic"
	"golang.org/x/sys/unix"
)

// TestRCTxCopiedBatch builds batches of FPDUs the way the send side does
// with the MPA CRC on (appendCopied: each FPDU whole in the bounce
// buffer), with and without markers, from ULPDUs gathered from several
// pieces (a header, payload slices of 0..1500 octets, PAD 0..3), and
// checks that the octets are those of the zero-copy framing
// (mpa.Sender.AppendVec, the CRC-off path and the framing before), that
// a batch is one iovec, and that writev of it through a socket pair,
// from every resume offset a short write can leave, delivers exactly the
// rest of the batch.
func TestRCTxCopiedBatch(t *testing.T) {
	sizes := []int{0, 1, 3, 64, 509, 1024, 1500, 2, 64}
	for _, markers := range []bool{false, true} {
		t.Run(fmt.Sprintf("markers=%v", markers), func(t *testing.T) {
			c := &conn{snd: mpa.NewSender(true, markers)}
			ref := mpa.NewSender(true, markers)
			// The stream does not start at 0: markers fall inside FPDUs.
			c.snd.SetStreamPos(300)
			ref.SetStreamPos(300)
			tx := &c.Tx
			tx.bounce = make([]byte, 0, 1<<16)
			var want []byte
			var vec [][]byte
			var scratch []byte
			for i, n := range sizes {
				hdr := testPayload(100+i, 18)
				p := testPayload(i, n)
				ulp := [][]byte{hdr, p[:n/3], p[n/3:]}
				tx.appendCopied(c, ulp)
				vec, scratch = ref.AppendVec(vec[:0], scratch[:0], ulp...)
				for _, v := range vec {
					want = append(want, v...)
				}
			}
			if len(tx.vec) != len(sizes) {
				t.Fatalf("%d slices for %d FPDUs", len(tx.vec), len(sizes))
			}
			if c.snd.StreamPos() != ref.StreamPos() {
				t.Fatalf("stream position %d, want %d", c.snd.StreamPos(), ref.StreamPos())
			}
			if iov := iovecs(nil, tx.vec, 0); len(iov) != 1 {
				t.Fatalf("a batch built in one bounce buffer is %d iovecs, want 1", len(iov))
			}
			for _, skip := range []int{0, 1, 2, 20, 21, len(want) / 2, len(want) - 1} {
				got := writevRead(t, iovecs(nil, tx.vec, skip))
				if !bytes.Equal(got, want[skip:]) {
					t.Fatalf("skip %d: %d octets differ from the AppendVec framing (%d octets)", skip, len(got), len(want)-skip)
				}
			}
		})
	}
}

// TestRCTxIovecsApart checks that slices that are not adjacent in memory
// stay separate iovecs, empty ones are dropped, and adjacent ones of one
// array merge, with the octets in order.
func TestRCTxIovecsApart(t *testing.T) {
	a, b := testPayload(1, 100), testPayload(2, 100)
	vec := [][]byte{a[:10], a[10:40], {}, b[:50], a[40:41], a[41:], b[50:]}
	var want []byte
	for _, p := range vec {
		want = append(want, p...)
	}
	iov := iovecs(nil, vec, 0)
	if len(iov) != 4 { // a[:40], b[:50], a[40:], b[50:]
		t.Fatalf("%d iovecs, want 4", len(iov))
	}
	for _, skip := range []int{0, 10, 39, 40, 90, 91, len(want) - 1} {
		if got := writevRead(t, iovecs(nil, vec, skip)); !bytes.Equal(got, want[skip:]) {
			t.Fatalf("skip %d: octets differ", skip)
		}
	}
}

// writevRead writes iov with one writev into a socket pair and reads
// back what arrives.
func writevRead(t *testing.T, iov []unix.Iovec) []byte {
	t.Helper()
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM, 0)
	if err != nil {
		t.Fatal(err)
	}
	r := os.NewFile(uintptr(fds[1]), "rx")
	defer r.Close()
	total := 0
	for _, v := range iov {
		total += int(v.Len)
	}
	n, err := rnic.RawWritev(fds[0], iov) // the pair's buffer holds a test batch
	unix.Close(fds[0])
	if err != nil || n != total {
		t.Fatalf("writev: %d of %d octets: %v", n, total, err)
	}
	got, err := io.ReadAll(r)
	if err != nil {
		t.Fatal(err)
	}
	return got
}
