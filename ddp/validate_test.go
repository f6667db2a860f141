package ddp

import (
	"errors"
	"math"
	"testing"

	"github.com/iwarpd/iwarpd/iwerr"
)

// fakeStags is a StagTable backed by a map.
type fakeStags map[uint32]struct {
	buf TaggedBuffer
	st  StagStatus
}

func (f fakeStags) LookupStag(stag uint32) (TaggedBuffer, StagStatus) {
	e, ok := f[stag]
	if !ok {
		return TaggedBuffer{}, StagInvalid
	}
	return e.buf, e.st
}

// fakeQueues is an UntaggedQueues with one buffer length for every message.
type fakeQueues struct {
	q      map[uint32]UntaggedQueue
	bufLen uint64
}

func (f fakeQueues) UntaggedQueue(qn uint32) (UntaggedQueue, bool) {
	q, ok := f.q[qn]
	return q, ok
}

func (f fakeQueues) UntaggedBufferLen(qn, msn uint32) uint64 { return f.bufLen }

func testReceiver() Receiver {
	return Receiver{
		Stags: fakeStags{
			0x100: {TaggedBuffer{Base: 0x1000, Length: 0x100}, StagValid},
			0x200: {TaggedBuffer{Base: 0x1000, Length: 0x100}, StagNotAssociated},
			0x300: {TaggedBuffer{Base: math.MaxUint64 - 0xff, Length: 0x100}, StagValid},
			0x400: {TaggedBuffer{}, StagInvalid},
		},
		Untagged: fakeQueues{
			q: map[uint32]UntaggedQueue{
				0: {ExpectedMSN: 10, Posted: 2, Window: 8},                      // datagram-style: out of order allowed
				1: {ExpectedMSN: 3, Posted: 4, InOrder: true, NextMO: 0},        // MPA-style
				2: {ExpectedMSN: math.MaxUint32, Posted: 3},                     // window 2^31, wraps
				3: {ExpectedMSN: 1, Posted: 1, InOrder: true, NextMO: 100},      // in the middle of a message
				7: {ExpectedMSN: 1, Posted: 1 << 20, Window: 0, InOrder: false}, // large
			},
			bufLen: 1000,
		},
	}
}

func tagged(stag uint32, to uint64) Header {
	return Header{Tagged: true, Version: Version, ULPControl: 0x40, Stag: stag, TO: to}
}

func untagged(qn, msn, mo uint32) Header {
	return Header{Version: Version, ULPControl: 0x43, QN: qn, MSN: msn, MO: mo}
}

func TestReceiverCheck(t *testing.T) {
	r := testReceiver()
	withVersion := func(h Header, v uint8) Header { h.Version = v; return h }
	withReserved := func(h Header) Header { h.Reserved = 0xf; h.ULPReserved = 0xffffffff; return h }
	cases := []struct {
		name string
		h    Header
		n    int
		want error // nil: accepted
	}{
		// Tagged: accepted.
		{"tagged whole buffer", tagged(0x100, 0x1000), 0x100, nil},
		{"tagged last octet", tagged(0x100, 0x10ff), 1, nil},
		{"tagged zero length at end", tagged(0x100, 0x1100), 0, nil},
		{"tagged up to 2^64-1", tagged(0x300, math.MaxUint64-0xff), 0x100, nil},
		{"tagged reserved bits ignored", withReserved(tagged(0x100, 0x1000)), 1, nil},
		// Tagged errors, one per code.
		{"tagged DV 0", withVersion(tagged(0x100, 0x1000), 0), 1, iwerr.DDPTaggedInvalidVersion},
		{"tagged DV 2 beats bad STag", withVersion(tagged(0x999, 0), 2), 1, iwerr.DDPTaggedInvalidVersion},
		{"unknown STag", tagged(0x999, 0x1000), 1, iwerr.DDPInvalidStag},
		{"invalidated STag", tagged(0x400, 0), 0, iwerr.DDPInvalidStag},
		{"STag of another stream", tagged(0x200, 0x1000), 1, iwerr.DDPStagNotAssociated},
		{"TO wrap", tagged(0x300, math.MaxUint64-0xff), 0x101, iwerr.DDPTOWrap},
		{"TO wrap max", tagged(0x300, math.MaxUint64), 2, iwerr.DDPTOWrap},
		{"below base", tagged(0x100, 0xfff), 1, iwerr.DDPBaseBounds},
		{"past end", tagged(0x100, 0x1000), 0x101, iwerr.DDPBaseBounds},
		{"starts past end", tagged(0x100, 0x1101), 0, iwerr.DDPBaseBounds},
		{"huge length", tagged(0x100, 0x1000), math.MaxInt32, iwerr.DDPBaseBounds},

		// Untagged: accepted.
		{"expected MSN", untagged(0, 10, 0), 1000, nil},
		{"second posted MSN out of order", untagged(0, 11, 500), 500, nil},
		{"in order", untagged(1, 3, 0), 10, nil},
		{"in order mid message", untagged(3, 1, 100), 900, nil},
		{"MSN wraps to 0", untagged(2, 0, 0), 1, nil},
		{"MSN wraps to 1", untagged(2, 1, 0), 1, nil},
		{"untagged reserved bits ignored", withReserved(untagged(0, 10, 0)), 1, nil},
		// Untagged errors, one per code.
		{"untagged DV 2", withVersion(untagged(0, 10, 0), 2), 1, iwerr.DDPUntaggedInvalidVersion},
		{"untagged DV 0 beats bad QN", withVersion(untagged(9, 10, 0), 0), 1, iwerr.DDPUntaggedInvalidVersion},
		{"QN not in use", untagged(4, 1, 0), 1, iwerr.DDPInvalidQN},
		{"QN huge", untagged(math.MaxUint32, 1, 0), 1, iwerr.DDPInvalidQN},
		{"MSN behind (duplicate)", untagged(0, 9, 0), 1, iwerr.DDPInvalidMSNRange},
		{"MSN beyond window", untagged(0, 18, 0), 1, iwerr.DDPInvalidMSNRange},
		{"MSN beyond 2^31", untagged(2, (1<<31)-1, 0), 1, iwerr.DDPInvalidMSNRange},
		{"in order: next MSN early", untagged(1, 4, 0), 1, iwerr.DDPInvalidMSNRange},
		{"MSN in window, no buffer", untagged(0, 12, 0), 1, iwerr.DDPInvalidMSNNoBuffer},
		{"MSN in window, last slot", untagged(0, 17, 0), 1, iwerr.DDPInvalidMSNNoBuffer},
		{"wrapped MSN, no buffer", untagged(2, 2, 0), 1, iwerr.DDPInvalidMSNNoBuffer},
		{"in order: MO gap", untagged(1, 3, 8), 1, iwerr.DDPInvalidMO},
		{"in order: MO restarts", untagged(3, 1, 0), 1, iwerr.DDPInvalidMO},
		{"MO + len beyond 2^32", untagged(7, 1, math.MaxUint32), 2, iwerr.DDPInvalidMO},
		{"too long", untagged(0, 10, 0), 1001, iwerr.DDPMessageTooLong},
		{"too long at offset", untagged(0, 11, 999), 2, iwerr.DDPMessageTooLong},
		{"starts past buffer", untagged(7, 5, 2000), 0, iwerr.DDPMessageTooLong},
	}
	for _, tt := range cases {
		t.Run(tt.name, func(t *testing.T) {
			err := r.Check(&tt.h, tt.n)
			if tt.want == nil {
				if err != nil {
					t.Fatalf("Check = %v, want nil", err)
				}
				return
			}
			if !errors.Is(err, tt.want) {
				t.Fatalf("Check = %v, want %v", err, tt.want)
			}
			var e iwerr.Error
			if !errors.As(err, &e) || e != tt.want {
				t.Fatalf("errors.As = %v, want the triple %v", e, tt.want)
			}
		})
	}
}

func TestReceiverCheckNilTables(t *testing.T) {
	var r Receiver
	h := tagged(1, 0)
	if err := r.Check(&h, 0); !errors.Is(err, iwerr.DDPInvalidStag) {
		t.Fatalf("nil Stags: %v", err)
	}
	h = untagged(0, 1, 0)
	if err := r.Check(&h, 0); !errors.Is(err, iwerr.DDPInvalidQN) {
		t.Fatalf("nil Untagged: %v", err)
	}
	if err := r.Check(&h, -1); !errors.Is(err, ErrBadLength) {
		t.Fatalf("negative length: %v", err)
	}
}

// Every segment a Segmenter produces passes the receiver's checks, in order.
func TestSegmentsPassCheck(t *testing.T) {
	const msgLen = 1000
	r := Receiver{Untagged: fakeQueues{
		q:      map[uint32]UntaggedQueue{0: {ExpectedMSN: 1, Posted: 1, InOrder: true}},
		bufLen: msgLen,
	}}
	s, err := UntaggedSegments(0x43, 0, 0, 1, msgLen, 77)
	if err != nil {
		t.Fatal(err)
	}
	var next uint32
	for {
		seg, ok := s.Next()
		if !ok {
			break
		}
		q := r.Untagged.(fakeQueues).q
		st := q[0]
		st.NextMO = next
		q[0] = st
		if err := r.Check(&seg.Header, seg.Len); err != nil {
			t.Fatalf("segment at MO %d: %v", seg.Header.MO, err)
		}
		next += uint32(seg.Len)
	}
}
