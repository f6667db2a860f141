package ud

import (
	"encoding/binary"
	"fmt"
	"net/netip"

	"github.com/iwarpd/iwarpd/ddp"
	"github.com/iwarpd/iwarpd/internal/crc32c"
	"github.com/iwarpd/iwarpd/iwerr"
	"github.com/iwarpd/iwarpd/llp/dgram"
	"github.com/iwarpd/iwarpd/proto"
	"github.com/iwarpd/iwarpd/rdmap"
	"github.com/iwarpd/iwarpd/verbsd/rnic"
	"golang.org/x/sys/unix"
)

// Error messages on datagram QPs (docs/wire-format.md §9): an untagged DDP
// message on QN 2, RDMAP opcode Terminate, whose body is the RFC 5040 §4.8
// Terminate header naming the error and the offending segment's DDP header.
// On UD they are sent best effort, straight from the receive path with one
// non-blocking sendto on the QP's socket (a full socket buffer loses it,
// counted as a send error); at most one per failed Write-Record (the record's
// tombstone drops its later segments silently), never about a datagram of a
// multicast group. A received error message is counted and raised as the
// asynchronous event EventQPAccessError on the QP (its detail names the
// source, the error and the STag/TO or QN/MSN); the QP stays up.

// errMsgMax bounds an error message: key header, DDP header, the longest
// Terminate header (4 + 2 + 18 + 28), CRC.
const errMsgMax = dgram.KeyHeaderLen + ddp.UntaggedHeaderLen + 52 + crc32c.Size

// sendErrorMessage tells dst (whose Q_Key is qkey: the Source Q_Key of the
// offending datagram) that its segment (DDP header ddpHdr, segLen octets)
// was refused with err.
func (e *Engine) sendErrorMessage(q *QP, dst netip.AddrPort, qkey uint32, err iwerr.Error, ddpHdr []byte, segLen int) {
	t := rdmap.TerminateFor(err, ddpHdr, nil)
	if t.DDPHeaderIncluded {
		t.SetSegmentLength(uint16(min(segLen, 0xffff)))
	}
	q.wrec.termMSN++
	h := ddp.Header{Last: true, Version: ddp.Version, ULPControl: uint8(rdmap.MakeControl(rdmap.OpTerminate)),
		QN: rdmap.QNTerminate, MSN: q.wrec.termMSN}
	var buf [errMsgMax]byte
	b := dgram.Keys{QKey: qkey, SrcQKey: q.Qkey}.Append(buf[:0])
	b = h.Append(b)
	b = t.Append(b)
	var c uint32
	if !q.NoCRC {
		c = crc32c.Checksum(b)
	}
	b = binary.LittleEndian.AppendUint32(b, c)
	if err := unix.Sendto(q.FD, b, unix.MSG_DONTWAIT, rnic.AddrToSockaddr(dst)); err != nil {
		e.count(q, rnic.CSendErrors, 1)
		if rnic.ClientSockBroken(q.QP, err) { // rnic/qpsock.go
			e.SocketFailed(q.QP, "sendto", err)
		}
		return
	}
	e.count(q, rnic.CErrorMsgsOut, 1)
	e.count(q, rnic.CDatagramsOut, 1)
}

// errorMessageIn handles a received error message (untagged, QN 2, opcode
// Terminate): body octets (DDP header included, CRC excluded) at off of
// receive slot i.
func (e *Engine) errorMessageIn(q *QP, i, off, body int, h *ddp.Header) {
	s := &e.Rb.Slots[i]
	var buf [errMsgMax]byte
	n := min(body-ddp.UntaggedHeaderLen, len(buf))
	rnic.CopyRange(buf[:n], s.View, off+ddp.UntaggedHeaderLen)
	t, _, err := rdmap.ParseTerminate(buf[:n])
	if err != nil || !h.Last || h.MO != 0 {
		e.count(q, rnic.CDropBadSegment, 1)
		return
	}
	e.count(q, rnic.CErrorMsgsIn, 1)
	detail := fmt.Sprintf("error message from %v: %v", s.Src, t.Err)
	if t.DDPHeaderIncluded {
		if dh, _, err := ddp.Parse(t.DDPHeader); err == nil {
			if dh.Tagged {
				detail += fmt.Sprintf(" (STag %#x TO %#x)", dh.Stag, dh.TO)
			} else {
				detail += fmt.Sprintf(" (QN %d MSN %d)", dh.QN, dh.MSN)
			}
		}
	}
	q.Session.SendEvent(e.Engine, proto.Event{Type: proto.EventQPAccessError, Handle: q.Handle, Detail: detail})
}
