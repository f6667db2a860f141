package fastpath

import (
	"math/rand/v2"
	"strconv"
	"strings"
	"testing"

	"github.com/iwarpd/iwarpd/ddp"
	"github.com/iwarpd/iwarpd/llp/dgram"
	"github.com/iwarpd/iwarpd/rdmap"
)

// TestEncodeRequests: the Read Request and Atomic Request datagrams the
// rank sends itself (c/core fastpath_req.c, issue 22) equal, octet for
// octet, what the daemon builds (verbsd/rd/send.go prepare and
// rd/atomic.go prepareAtomic: ddp.UntaggedSegments on QN 1 with the
// request's MSN, rdmap.ReadRequest / rdmap.AtomicRequest, framed by
// dgram.AppendRD) — edge values of every field, every atomic operation
// with the masks the daemon and the rank use, CRC on and off.
func TestEncodeRequests(t *testing.T) {
	p := start(t, sanitizedProgram(t))
	r := rand.New(rand.NewPCG(22, 7))
	u64 := func() uint64 { return uint64(edge(r))<<32 | uint64(edge(r)) }
	n := 0
	for k := range 96 {
		keys := dgram.Keys{QKey: edge(r), SrcQKey: edge(r)}
		crc := k%2 == 0
		h := randRDHeader(r)
		msn := edge(r)
		var body []byte
		var args string
		if k%3 == 0 {
			rr := rdmap.ReadRequest{SinkStag: edge(r), SinkTO: u64(), Size: edge(r), SourceStag: edge(r), SourceTO: u64()}
			segs, err := ddp.UntaggedSegments(uint8(rdmap.MakeControl(rdmap.OpReadRequest)), 0, rdmap.QNReadRequest, msn,
				rdmap.ReadRequestLen, 4096)
			if err != nil || segs.Count() != 1 {
				t.Fatalf("segments: %v", err)
			}
			dh := segs.Segment(0)
			body = rr.Append(dh.Header.Append(nil))
			args = fmtArgs(uint32(rdmap.OpReadRequest), msn, rr.SinkStag, uint32(rr.SinkTO>>32), uint32(rr.SinkTO), rr.Size,
				rr.SourceStag, uint32(rr.SourceTO>>32), uint32(rr.SourceTO))
		} else {
			op := []rdmap.AtomicOp{rdmap.AtomicFetchAdd, rdmap.AtomicSwap, rdmap.AtomicCmpSwap}[k%3]
			ar := rdmap.AtomicRequest{Op: op, ReqID: edge(r), Stag: edge(r), TO: u64(), AddSwap: u64(), Compare: u64()}
			if op != rdmap.AtomicFetchAdd {
				ar.AddSwapMask = ^uint64(0)
			}
			if op == rdmap.AtomicCmpSwap {
				ar.CompareMask = ^uint64(0)
			}
			if k%5 == 0 { // any masks: the encoder carries them as given
				ar.AddSwapMask, ar.CompareMask = u64(), u64()
			}
			segs, err := ddp.UntaggedSegments(uint8(rdmap.MakeControl(rdmap.OpAtomicRequest)), 0, rdmap.QNReadRequest, msn,
				rdmap.AtomicRequestLen, 4096)
			if err != nil || segs.Count() != 1 {
				t.Fatalf("segments: %v", err)
			}
			dh := segs.Segment(0)
			body = ar.Append(dh.Header.Append(nil))
			args = fmtArgs(uint32(rdmap.OpAtomicRequest), msn, uint32(op), ar.ReqID, ar.Stag, uint32(ar.TO>>32), uint32(ar.TO),
				uint32(ar.AddSwap>>32), uint32(ar.AddSwap), uint32(ar.AddSwapMask>>32), uint32(ar.AddSwapMask),
				uint32(ar.Compare>>32), uint32(ar.Compare), uint32(ar.CompareMask>>32), uint32(ar.CompareMask))
		}
		gh := h
		gh.Version, gh.Type = dgram.RDVersion, dgram.RDData
		want := hexOr(dgram.AppendRD(nil, keys, &gh, crc, body, nil))
		got := strings.TrimSpace(p.ask("req %d %d %d %d %d %d %d %d %d %d %s", keys.QKey, keys.SrcQKey, b2i(crc), h.Flags, h.Window,
			h.Incarnation, h.EchoedIncarnation, h.Seq, h.CumAck, h.SACK, args))
		if got != want {
			t.Fatalf("request %d (%s):\nC  %s\nGo %s", k, args, got, want)
		}
		n++
	}
	t.Logf("%d datagrams equal", n)
}

func fmtArgs(v ...uint32) string {
	s := make([]string, len(v))
	for i, x := range v {
		s[i] = strconv.FormatUint(uint64(x), 10)
	}
	return strings.Join(s, " ")
}
