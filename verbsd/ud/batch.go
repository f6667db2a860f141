package ud

import (
	"net/netip"
	"unsafe"

	"github.com/iwarpd/iwarpd/ddp"
	"github.com/iwarpd/iwarpd/internal/crc32c"
	"github.com/iwarpd/iwarpd/llp/dgram"
	"github.com/iwarpd/iwarpd/verbsd/rnic"
	"golang.org/x/sys/unix"
)

// Bounds of one sendmmsg batch (engine-wide scratch, allocated once).
const (
	MaxSendMsgs   = 64      // msghdrs per sendmmsg
	maxSendDgrams = 1024    // datagrams per batch
	maxSendIOVs   = 4096    // iovecs per batch
	maxSendBytes  = 1 << 20 // UDP payload octets per batch (one may exceed it alone)
	maxSendWRs    = 256     // work requests looked at per batch
	// dgramScratch is the per-datagram scratch: the key header (8), the
	// DDP header (and the Write-Record header of a tagged segment: 14+12,
	// and its Immediate Data: +8), then the CRC trailer (8-aligned stride).
	dgramScratch = 48
)

// DgramRef names the work request (index in the batch) and segment a
// datagram of the batch carries.
type DgramRef struct {
	wr  int32
	Seg uint32
}

// SendBatch is the vector of one sendmmsg under construction. Each message
// is one UDP datagram or, with GSO, several datagrams for one destination,
// all of the same length but maybe the last, which the kernel cuts apart
// (UDP_SEGMENT); its payload is the concatenation
// [hdr1|payload1|crc1|hdr2|payload2|crc2|...] expressed by iovecs over the
// header/CRC scratch and slices of registered memory: no staging copy.
type SendBatch struct {
	msgs    []unix.Mmsghdr
	Names   []unix.RawSockaddrInet6
	cmsgs   []uint64 // cmsgUDPLen/8 words per message (8-aligned)
	iovs    []unix.Iovec
	scratch []byte
	dgrams  []DgramRef
	first   []int // index in dgrams of each message's first datagram

	nmsg, niov, ndg, bytes int
	gso                    bool

	// The open (last) message.
	open    bool
	dest    netip.AddrPort
	segSize int // length of its first datagram: the GSO segment size
	count   int // its datagrams
	mbytes  int // its octets
	iov0    int // its first iovec
	short   bool
}

func NewSendBatch() *SendBatch {
	return &SendBatch{
		msgs:    make([]unix.Mmsghdr, MaxSendMsgs),
		Names:   make([]unix.RawSockaddrInet6, MaxSendMsgs),
		cmsgs:   make([]uint64, MaxSendMsgs*cmsgUDPLen/8),
		iovs:    make([]unix.Iovec, maxSendIOVs),
		scratch: make([]byte, maxSendDgrams*dgramScratch),
		dgrams:  make([]DgramRef, maxSendDgrams),
		first:   make([]int, MaxSendMsgs+1),
	}
}

// Reset empties the batch; gso allows several datagrams per message.
func (b *SendBatch) Reset(gso bool) {
	b.nmsg, b.niov, b.ndg, b.bytes = 0, 0, 0, 0
	b.gso, b.open = gso, false
}

// joins reports whether a datagram of dlen octets and nio iovecs to dest
// can go into the open message.
func (b *SendBatch) joins(dest netip.AddrPort, dlen, nio int) bool {
	return b.open && b.gso && !b.short && dest == b.dest && dlen <= b.segSize && b.count < MaxGSOSegments &&
		b.mbytes+dlen <= maxGSOBytes && b.niov-b.iov0+nio <= maxIOVPerMsg
}

// Fits reports whether a datagram of dlen octets made of nio iovecs to dest
// can be added, with at most maxMsgs messages in the batch.
func (b *SendBatch) Fits(dest netip.AddrPort, dlen, nio, maxMsgs int) bool {
	if b.ndg == len(b.dgrams) || b.niov+nio > len(b.iovs) || (b.ndg > 0 && b.bytes+dlen > maxSendBytes) {
		return false
	}
	return b.joins(dest, dlen, nio) || (b.nmsg < min(maxMsgs, len(b.msgs)) && nio <= maxIOVPerMsg)
}

// NextScratch returns the header/CRC scratch of the next datagram.
func (b *SendBatch) NextScratch() []byte {
	off := b.ndg * dgramScratch
	return b.scratch[off : off+dgramScratch : off+dgramScratch]
}

// Push adds a datagram made of hdr (in NextScratch), pieces and crc (also in
// NextScratch); the caller checked fits.
func (b *SendBatch) Push(dest netip.AddrPort, hdr []byte, pieces [][]byte, crc []byte, ref DgramRef) {
	dlen := len(hdr) + len(crc)
	for _, p := range pieces {
		dlen += len(p)
	}
	if !b.joins(dest, dlen, 2+len(pieces)) {
		b.close()
		b.first[b.nmsg] = b.ndg
		b.nmsg++
		b.open, b.dest, b.segSize, b.count, b.mbytes, b.iov0, b.short = true, dest, dlen, 0, 0, b.niov, false
	}
	setIov(&b.iovs[b.niov], hdr)
	b.niov++
	for _, p := range pieces {
		if len(p) > 0 {
			setIov(&b.iovs[b.niov], p)
			b.niov++
		}
	}
	setIov(&b.iovs[b.niov], crc)
	b.niov++
	b.dgrams[b.ndg] = ref
	b.ndg++
	b.count++
	b.mbytes += dlen
	b.bytes += dlen
	if dlen < b.segSize {
		b.short = true
	}
}

// close fills in the msghdr of the open message.
func (b *SendBatch) close() {
	if !b.open {
		return
	}
	b.open = false
	i := b.nmsg - 1
	h := &b.msgs[i].Hdr
	*h = unix.Msghdr{}
	b.msgs[i].Len = 0
	h.Namelen = PutSockaddr(&b.Names[i], b.dest)
	h.Name = (*byte)(unsafe.Pointer(&b.Names[i]))
	h.Iov = &b.iovs[b.iov0]
	h.SetIovlen(b.niov - b.iov0)
	if b.count > 1 {
		cm := b.CmsgBytes(i)
		h.Control = &cm[0]
		h.SetControllen(putSegmentCmsg(cm, uint16(b.segSize)))
	}
}

func (b *SendBatch) CmsgBytes(i int) []byte {
	w := b.cmsgs[i*cmsgUDPLen/8 : (i+1)*cmsgUDPLen/8]
	return unsafe.Slice((*byte)(unsafe.Pointer(&w[0])), cmsgUDPLen)
}

// Finish closes the batch and returns its messages.
func (b *SendBatch) Finish() []unix.Mmsghdr {
	b.close()
	b.first[b.nmsg] = b.ndg
	return b.msgs[:b.nmsg]
}

// MsgDgrams returns the datagrams of message i.
func (b *SendBatch) MsgDgrams(i int) []DgramRef { return b.dgrams[b.first[i]:b.first[i+1]] }

// RecvSlots is the most datagram buffers of one recvmmsg.
const RecvSlots = 32

// slotTailLen is the overflow scratch of a receive slot: any UDP payload,
// also a GRO-coalesced one, fits behind the header scratch.
const slotTailLen = 64 << 10

// recvSlot is one msghdr of a recvmmsg: [header scratch][tail scratch],
// and what the kernel wrote back. No client memory is ever in a slot's
// view: a datagram is judged whole (Q_Key, CRC, headers, lengths) before
// any octet of it is copied into a posted receive, so that a datagram
// dropped later never touches client memory (with several
// receives posted on one buffer, as verbs allows, a junk datagram
// looked ahead into the second overwrote the message the first had
// completed).
type recvSlot struct {
	Hdr  [slotHeaderLen]byte
	Tail []byte
	name unix.RawSockaddrInet6
	cmsg [cmsgUDPLen / 8]uint64
	View [][]byte // the pieces its iovecs cover

	N     int // octets received
	Trunc bool
	Gso   int // UDP_GRO segment size (0: one datagram)
	Src   netip.AddrPort
}

// slotHeaderLen is a slot's first piece: the key header and an untagged DDP
// header, so that the headers of a single datagram are in one array.
const slotHeaderLen = dgram.KeyHeaderLen + ddp.UntaggedHeaderLen

// RecvBatch is the engine's recvmmsg vector and the receives matched with
// its slots (looked ahead in the receive ring, consumed in order).
type RecvBatch struct {
	Slots []recvSlot
	msgs  []unix.Mmsghdr
	iovs  []unix.Iovec
	Rqes  []rnic.RecvWR // rqes[k]: the k-th posted receive after the head at the batch's start (translated, not placed into)
	Nrqe  int           // valid entries of rqes
	Used  int           // receives consumed in this batch
	extra rnic.RecvWR   // a receive looked at beyond rqes
	mcast bool          // the batch was read from a multicast group's socket
	// srcQKey is the Source Q_Key of the datagram being judged: the key
	// its error message, if any, names.
	srcQKey uint32
	// peek holds the headers of the datagram at the head of a socket
	// (ud/backlog.go headNeedsRecv).
	peek [slotHeaderLen]byte
}

func NewRecvBatch() *RecvBatch {
	b := &RecvBatch{Slots: make([]recvSlot, RecvSlots), msgs: make([]unix.Mmsghdr, RecvSlots),
		Rqes: make([]rnic.RecvWR, RecvSlots)}
	tails := make([]byte, RecvSlots*slotTailLen)
	// Touch every page now: RD and GRO traffic land in the tails, and a
	// first burst would otherwise fault them in one page at a time on the
	// data path (and show up as memory growth of whatever traffic came
	// first: 2 MiB is a fixed cost of the engine, docs/memory.md).
	for i := 0; i < len(tails); i += 4096 {
		tails[i] = 0xff
	}
	for i := range b.Slots {
		b.Slots[i].Tail = tails[i*slotTailLen : (i+1)*slotTailLen : (i+1)*slotTailLen]
	}
	return b
}

// Prepare sets up n slots, each [header scratch][tail scratch].
func (b *RecvBatch) Prepare(n int) []unix.Mmsghdr {
	need := 2 * n
	if len(b.iovs) < need {
		b.iovs = make([]unix.Iovec, need)
	}
	k := 0
	for i := range n {
		s := &b.Slots[i]
		s.View = append(s.View[:0], s.Hdr[:], s.Tail)
		s.N, s.Trunc, s.Gso = 0, false, 0
		h := &b.msgs[i].Hdr
		*h = unix.Msghdr{}
		b.msgs[i].Len = 0
		h.Name = (*byte)(unsafe.Pointer(&s.name))
		h.Namelen = unix.SizeofSockaddrInet6
		h.Control = (*byte)(unsafe.Pointer(&s.cmsg[0]))
		h.SetControllen(cmsgUDPLen)
		h.Iov = &b.iovs[k]
		for _, p := range s.View {
			setIov(&b.iovs[k], p)
			k++
		}
		h.SetIovlen(len(s.View))
	}
	return b.msgs[:n]
}

// Received records what the kernel wrote for the first n slots.
func (b *RecvBatch) Received(n int) {
	for i := range n {
		s, h := &b.Slots[i], &b.msgs[i].Hdr
		s.N = int(b.msgs[i].Len)
		s.Trunc = h.Flags&unix.MSG_TRUNC != 0
		s.Src = GetSockaddr(&s.name, h.Namelen)
		cm := unsafe.Slice((*byte)(unsafe.Pointer(&s.cmsg[0])), cmsgUDPLen)
		s.Gso = GROSegmentSize(cm, int(h.Controllen))
	}
}

// ChecksumAt returns the CRC32c of octets [off, off+n) of pieces.
func ChecksumAt(pieces [][]byte, off, n int) uint32 {
	var c uint32
	for _, p := range pieces {
		if n <= 0 {
			break
		}
		if off >= len(p) {
			off -= len(p)
			continue
		}
		k := min(len(p)-off, n)
		c = crc32c.Update(c, p[off:off+k])
		n -= k
		off = 0
	}
	return c
}
