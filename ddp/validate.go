package ddp

import (
	"errors"
	"fmt"
	"math"

	"github.com/iwarpd/iwarpd/iwerr"
)

// Receive-side checks of one DDP segment (RFC 5041 §7.2, "DDP Error Numbers",
// and the receiver requirements of §5 and §7). Every check returns an error
// wrapping the exact iwerr triple the Terminate must carry, so the caller
// writes errors.As(err, &e) and puts e into rdmap.TerminateFor.
//
// Reserved bits: RFC 5041 §4.1 defines Rsvd as set to zero on transmit and
// not checked on receipt (quoted from memory; the RFC text was not
// retrievable here), so Check ignores Header.Reserved: a peer setting them is
// not an error. RsvdULP belongs to the ULP (RDMAP) and is not looked at
// either. Senders (Segmenter) always send Reserved = 0.
//
// Order of the checks, first failure wins (as in siw):
//
//	tagged:   DV → STag valid → STag associated → TO wrap → base/bounds
//	untagged: DV → QN in use → MSN in range → buffer posted → MO → length
//
// What Check does not do: it does not place data, does not advance any
// state (the caller updates ExpectedMSN/NextMO after a segment is accepted),
// and does not check RDMAP semantics (opcode, access rights: see rdmap's
// TaggedError/RDMAPError for mapping access faults).

// StagStatus says what a StagTable knows about an STag.
type StagStatus uint8

const (
	StagValid         StagStatus = iota // usable on this stream
	StagInvalid                         // unknown or invalidated: ECode 0x00
	StagNotAssociated                   // valid, but not on this DDP stream (PD mismatch): ECode 0x02
)

// TaggedBuffer is the TO range an STag names: [Base, Base+Length).
type TaggedBuffer struct {
	Base   uint64
	Length uint64
}

// StagTable resolves the Data Sink STag of a tagged segment. The caller (the
// engine's memory registry) implements it; access rights are RDMAP's concern
// and are checked by the caller.
type StagTable interface {
	LookupStag(stag uint32) (TaggedBuffer, StagStatus)
}

// UntaggedQueue is the receiver's state for one untagged queue when a
// segment arrives.
type UntaggedQueue struct {
	// ExpectedMSN is the MSN of the oldest message on this queue not yet
	// fully received (1 on a new stream).
	ExpectedMSN uint32
	// Posted is the number of receive buffers available, for messages
	// ExpectedMSN … ExpectedMSN+Posted−1.
	Posted uint32
	// Window bounds the valid MSN range: an MSN behind ExpectedMSN, or
	// Window or more ahead of it (modulo 2^32), is "MSN range is not
	// valid" (0x03). An MSN inside the window but beyond Posted is
	// "no buffer available" (0x02). 0 means 2^31 (serial-number arithmetic).
	Window uint32
	// InOrder is set when the LLP delivers segments in order (MPA over TCP,
	// and RD after its reordering): then the segment must belong to
	// ExpectedMSN (else 0x03) and start at NextMO (else 0x04), as siw checks.
	InOrder bool
	NextMO  uint32
}

// UntaggedQueues is the receiver's view of its untagged queues.
type UntaggedQueues interface {
	// UntaggedQueue returns the state of queue qn, or false when qn is
	// not in use on this stream.
	UntaggedQueue(qn uint32) (UntaggedQueue, bool)
	// UntaggedBufferLen returns the length of the buffer posted for message
	// msn on queue qn; it is called only for an MSN within Posted.
	UntaggedBufferLen(qn, msn uint32) uint64
}

// Receiver is what Check needs to know about the local end of a DDP stream.
// A nil Stags rejects every tagged segment with "invalid STag"; a nil
// Untagged rejects every untagged segment with "invalid QN".
type Receiver struct {
	Stags    StagTable
	Untagged UntaggedQueues
}

// ErrBadLength is returned for a negative payload length (a caller bug, not
// a peer error, so it wraps no iwerr value).
var ErrBadLength = errors.New("ddp: negative payload length")

// Check validates a received segment's header h carrying payloadLen octets
// of payload and returns nil or an error wrapping the iwerr.Error to report.
func (r Receiver) Check(h *Header, payloadLen int) error {
	if payloadLen < 0 {
		return fmt.Errorf("%w: %d", ErrBadLength, payloadLen)
	}
	if h.Tagged {
		return r.checkTagged(h, uint64(payloadLen))
	}
	return r.checkUntagged(h, uint64(payloadLen))
}

func (r Receiver) checkTagged(h *Header, n uint64) error {
	if h.Version != Version {
		return fmt.Errorf("ddp: tagged segment: DV %d: %w", h.Version, iwerr.DDPTaggedInvalidVersion)
	}
	if r.Stags == nil {
		return fmt.Errorf("ddp: STag 0x%08x: no tagged buffers: %w", h.Stag, iwerr.DDPInvalidStag)
	}
	buf, st := r.Stags.LookupStag(h.Stag)
	switch st {
	case StagValid:
	case StagNotAssociated:
		return fmt.Errorf("ddp: STag 0x%08x: %w", h.Stag, iwerr.DDPStagNotAssociated)
	default:
		return fmt.Errorf("ddp: STag 0x%08x: %w", h.Stag, iwerr.DDPInvalidStag)
	}
	// The last octet, TO+n−1, must not pass 2^64−1.
	if n > 0 && n-1 > math.MaxUint64-h.TO {
		return fmt.Errorf("ddp: STag 0x%08x: TO 0x%x + %d octets: %w", h.Stag, h.TO, n, iwerr.DDPTOWrap)
	}
	// [TO, TO+n) ⊆ [Base, Base+Length), written without overflow.
	if h.TO < buf.Base || h.TO-buf.Base > buf.Length || n > buf.Length-(h.TO-buf.Base) {
		return fmt.Errorf("ddp: STag 0x%08x: TO 0x%x + %d outside [0x%x, +%d): %w",
			h.Stag, h.TO, n, buf.Base, buf.Length, iwerr.DDPBaseBounds)
	}
	return nil
}

func (r Receiver) checkUntagged(h *Header, n uint64) error {
	if h.Version != Version {
		return fmt.Errorf("ddp: untagged segment: DV %d: %w", h.Version, iwerr.DDPUntaggedInvalidVersion)
	}
	var q UntaggedQueue
	ok := false
	if r.Untagged != nil {
		q, ok = r.Untagged.UntaggedQueue(h.QN)
	}
	if !ok {
		return fmt.Errorf("ddp: QN %d: %w", h.QN, iwerr.DDPInvalidQN)
	}
	d := h.MSN - q.ExpectedMSN // distance ahead, modulo 2^32
	window := q.Window
	if window == 0 {
		window = 1 << 31
	}
	if d >= window || (q.InOrder && d != 0) {
		return fmt.Errorf("ddp: QN %d: MSN %d, expected %d: %w", h.QN, h.MSN, q.ExpectedMSN, iwerr.DDPInvalidMSNRange)
	}
	if d >= q.Posted {
		return fmt.Errorf("ddp: QN %d: MSN %d, %d buffers from MSN %d: %w", h.QN, h.MSN, q.Posted, q.ExpectedMSN, iwerr.DDPInvalidMSNNoBuffer)
	}
	end := uint64(h.MO) + n
	if end > 1<<32 || (q.InOrder && h.MO != q.NextMO) {
		return fmt.Errorf("ddp: QN %d MSN %d: MO %d (+%d), expected %d: %w", h.QN, h.MSN, h.MO, n, q.NextMO, iwerr.DDPInvalidMO)
	}
	if bl := r.Untagged.UntaggedBufferLen(h.QN, h.MSN); end > bl {
		return fmt.Errorf("ddp: QN %d MSN %d: MO %d + %d octets > buffer %d: %w", h.QN, h.MSN, h.MO, n, bl, iwerr.DDPMessageTooLong)
	}
	return nil
}
