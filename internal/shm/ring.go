package shm

import (
	"errors"
	"fmt"
	"sync/atomic"
	"unsafe"

	"github.com/iwarpd/iwarpd/proto"
)

// ErrRingCorrupt means the other side stored an index that no correct
// producer or consumer could have stored.
var ErrRingCorrupt = errors.New("shm: ring index out of range")

// Ring is a view of a proto ring (header and entries) in a region.
type Ring struct {
	mem      []byte
	entries  []byte
	depth    uint32
	mask     uint32
	stride   uint32
	producer *atomic.Uint32
	consumer *atomic.Uint32
	arm      *atomic.Uint32
	overrun  *atomic.Uint32
}

// NewRing lays a ring over mem. With init it writes a fresh header (the
// creator); otherwise it checks the header the creator wrote.
func NewRing(mem []byte, kind proto.RingKind, depth, stride uint32, init bool) (*Ring, error) {
	if !proto.ValidDepth(depth) || stride == 0 || stride%16 != 0 {
		return nil, fmt.Errorf("shm: ring: depth %d stride %d: invalid", depth, stride)
	}
	need := proto.RingBytes(depth, stride)
	if len(mem) < need {
		return nil, fmt.Errorf("shm: ring: %d bytes, need %d", len(mem), need)
	}
	mem = mem[:need]
	if init {
		proto.InitRingHeader(mem, kind, depth, stride)
	} else if err := proto.CheckRingHeader(mem, kind, depth, stride); err != nil {
		return nil, err
	}
	word := func(off int) *atomic.Uint32 { return (*atomic.Uint32)(unsafe.Pointer(&mem[off])) }
	return &Ring{
		mem:      mem,
		entries:  mem[proto.RingHeaderLen : proto.RingHeaderLen+int(depth)*int(stride)],
		depth:    depth,
		mask:     depth - 1,
		stride:   stride,
		producer: word(proto.OffRingProducer),
		consumer: word(proto.OffRingConsumer),
		arm:      word(proto.OffRingArm),
		overrun:  word(proto.OffRingOverrun),
	}, nil
}

// Depth returns the number of entries.
func (r *Ring) Depth() uint32 { return r.depth }

// Stride returns the entry size.
func (r *Ring) Stride() uint32 { return r.stride }

// Bytes returns the ring's whole region (header and entries).
func (r *Ring) Bytes() []byte { return r.mem }

func (r *Ring) slot(i uint32) []byte {
	off := (i & r.mask) * r.stride
	return r.entries[off : off+r.stride : off+r.stride]
}

// Arm returns the CQ arming word.
func (r *Ring) Arm() *atomic.Uint32 { return r.arm }

// Overrun returns the CQ overrun word.
func (r *Ring) Overrun() *atomic.Uint32 { return r.overrun }

// Producer writes entries into a ring. Its own index is kept locally, so a
// consumer in another process cannot make it overwrite unconsumed entries
// by lying about the consumer index: a consumer index outside
// [head-depth, head] is reported as ErrRingCorrupt.
type Producer struct {
	r    *Ring
	head uint32 // next entry to fill
	pub  uint32 // last published head
}

// NewProducer starts producing at the ring's current producer index.
func NewProducer(r *Ring) *Producer {
	h := r.producer.Load()
	return &Producer{r: r, head: h, pub: h}
}

// Next returns the next free slot, or nil when the ring is full. The slot
// becomes visible to the consumer at the next Publish.
func (p *Producer) Next() ([]byte, error) {
	cons := p.r.consumer.Load()
	used := p.head - cons
	if used > p.r.depth {
		return nil, fmt.Errorf("%w: producer %d consumer %d depth %d", ErrRingCorrupt, p.head, cons, p.r.depth)
	}
	if used == p.r.depth {
		return nil, nil
	}
	s := p.r.slot(p.head)
	p.head++
	return s, nil
}

// Publish makes every slot returned by Next visible to the consumer.
func (p *Producer) Publish() {
	if p.head != p.pub {
		p.r.producer.Store(p.head)
		p.pub = p.head
	}
}

// Free returns how many slots Next can still return (0 if corrupt).
func (p *Producer) Free() uint32 {
	used := p.head - p.r.consumer.Load()
	if used > p.r.depth {
		return 0
	}
	return p.r.depth - used
}

// Consumer reads entries from a ring, validating the producer index.
type Consumer struct {
	r    *Ring
	tail uint32
	rel  uint32
}

// NewConsumer starts consuming at the ring's current consumer index.
func NewConsumer(r *Ring) *Consumer {
	t := r.consumer.Load()
	return &Consumer{r: r, tail: t, rel: t}
}

// Available returns how many published entries are waiting, or
// ErrRingCorrupt when the producer index is impossible.
func (c *Consumer) Available() (uint32, error) {
	prod := c.r.producer.Load()
	n := prod - c.tail
	if n > c.r.depth {
		return 0, fmt.Errorf("%w: producer %d consumer %d depth %d", ErrRingCorrupt, prod, c.tail, c.r.depth)
	}
	return n, nil
}

// Peek returns the oldest unconsumed entry without consuming it, or nil.
// The slot may still be written by a hostile producer: copy it before
// validating.
func (c *Consumer) Peek() ([]byte, error) {
	n, err := c.Available()
	if err != nil || n == 0 {
		return nil, err
	}
	return c.r.slot(c.tail), nil
}

// Advance consumes the entry Peek returned.
func (c *Consumer) Advance() { c.tail++ }

// Adopt takes the ring's published consumer index as c's own: another
// consumer took entries meanwhile (a UD QP's rank consumes its receive
// queue while it owns the QP's socket, docs/fastpath.md "Posted
// receives"). The index must lie in [c's own, producer]: the other side
// may only have consumed what was published and not yet consumed; else
// ErrRingCorrupt and c is unchanged.
func (c *Consumer) Adopt() error {
	cons, prod := c.r.consumer.Load(), c.r.producer.Load()
	if cons-c.rel > prod-c.rel || c.tail != c.rel {
		return fmt.Errorf("%w: consumer %d outside [%d, producer %d] (unreleased %d)", ErrRingCorrupt, cons, c.rel, prod, c.tail-c.rel)
	}
	c.tail, c.rel = cons, cons
	return nil
}

// Release tells the producer every advanced entry may be reused.
func (c *Consumer) Release() {
	if c.tail != c.rel {
		c.r.consumer.Store(c.tail)
		c.rel = c.tail
	}
}
