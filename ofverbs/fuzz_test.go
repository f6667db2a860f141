package ofverbs

import (
	"encoding/binary"
	"errors"
	"testing"

	"github.com/iwarpd/iwarpd/internal/shm"
	"github.com/iwarpd/iwarpd/proto"
	"golang.org/x/sys/unix"
)

// FuzzPoll fills a CQ ring with arbitrary entries and a producer index and
// polls it: Poll must never panic, never return more than asked, and report
// an impossible producer index as an error wrapping EIO.
func FuzzPoll(f *testing.F) {
	valid := make([]byte, proto.CQESize)
	e := proto.CQE{WRID: 7, Opcode: proto.WCRecv, ByteLen: 9}
	e.Put(valid)
	f.Add(valid, uint32(1), uint8(4))
	f.Add(valid, uint32(9), uint8(2))
	f.Add([]byte{}, uint32(0), uint8(1))
	f.Fuzz(func(t *testing.T, entries []byte, producer uint32, want uint8) {
		const depth = 8
		reg, err := shm.Create("fuzz-cq", proto.RingBytes(depth, proto.CQESize))
		if err != nil {
			t.Skip(err)
		}
		defer reg.Close()
		ring, err := shm.NewRing(reg.Mem, proto.RingCQ, depth, proto.CQESize, true)
		if err != nil {
			t.Fatal(err)
		}
		copy(reg.Mem[proto.RingHeaderLen:proto.RingHeaderLen+depth*proto.CQESize], entries)
		binary.LittleEndian.PutUint32(reg.Mem[proto.OffRingProducer:], producer)
		cq := &CQ{ring: ring, cons: shm.NewConsumer(ring), region: reg}
		wcs := make([]WC, want%16)
		n, err := cq.Poll(wcs)
		if n < 0 || n > len(wcs) {
			t.Fatalf("Poll returned %d for %d slots", n, len(wcs))
		}
		if producer > depth && len(wcs) > 0 && !errors.Is(err, unix.EIO) {
			t.Fatalf("impossible producer index %d: err %v", producer, err)
		}
		if producer <= depth && (err != nil || n != min(int(producer), len(wcs))) {
			t.Fatalf("producer %d: Poll = %d, %v", producer, n, err)
		}
		if n > 0 {
			var want proto.CQE
			proto.GetCQE(reg.Mem[proto.RingHeaderLen:], &want)
			if wcs[0].ID != want.WRID || wcs[0].ByteLen != want.ByteLen || wcs[0].Src != want.Src {
				t.Fatalf("wc %+v, entry %+v", wcs[0], want)
			}
		}
	})
}

// FuzzDecodeReply feeds arbitrary reply headers and bodies to the reply
// decoder: it must never panic, and error replies must keep their errno.
func FuzzDecodeReply(f *testing.F) {
	f.Add(uint16(proto.ABIVersion), uint32(0), []byte(`{"handle":3,"lkey":4,"rkey":5}`))
	f.Add(uint16(proto.ABIVersion), uint32(unix.ENOMEM), []byte(`{"error":"too many"}`))
	f.Add(uint16(2), uint32(unix.EPROTO), []byte(`{"error":"version"}`))
	f.Add(uint16(proto.ABIVersion), uint32(0), []byte(`{"handle":`))
	f.Fuzz(func(t *testing.T, version uint16, status uint32, body []byte) {
		var rep proto.RegMRReply
		err := decodeReply("reg-mr", reply{h: proto.Header{Version: version, Op: proto.OpRegMR | proto.OpReply, Status: unix.Errno(status)}, body: body}, &rep)
		switch {
		case version != proto.ABIVersion:
			var verr *proto.VersionError
			if !errors.As(err, &verr) {
				t.Fatalf("version %d: %v", version, err)
			}
		case status != 0:
			if !errors.Is(err, unix.Errno(status)) {
				t.Fatalf("status %d: %v", status, err)
			}
		}
	})
}
