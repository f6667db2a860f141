package dissect

// Thin adapters over the protocol packages' codecs (mpa, rdmap, llp/dgram):
// dissect parses nothing itself.

import (
	"errors"

	"github.com/google/gopacket"

	"github.com/iwarpd/iwarpd/llp/dgram"
	"github.com/iwarpd/iwarpd/mpa"
	"github.com/iwarpd/iwarpd/rdmap"
)

func isMPATruncated(err error) bool { return errors.Is(err, mpa.ErrTruncated) }

// parseDatagram runs dgram.ParseUD or ParseRD. A CRC mismatch is not an
// error here: the datagram is decoded without the check and CRCValid is
// false, so that iwarpdump can still show what it carried.
func parseDatagram(b []byte, rd, checkCRC bool) (dgram.Datagram, error) {
	parse := dgram.ParseUD
	if rd {
		parse = dgram.ParseRD
	}
	g, err := parse(b, checkCRC)
	if !errors.Is(err, dgram.ErrBadCRC) {
		if err == nil && !checkCRC {
			g.CRCValid = true // "not checked" reads as valid, as mpa.FPDU
		}
		return g, err
	}
	wire, computed := g.CRC, g.ComputedCRC
	g, err = parse(b, false)
	g.CRC, g.ComputedCRC, g.CRCValid = wire, computed, false
	return g, err
}

func parseUD(b []byte, checkCRC bool) (dgram.Datagram, error) {
	return parseDatagram(b, false, checkCRC)
}
func parseRD(b []byte, checkCRC bool) (dgram.Datagram, error) {
	return parseDatagram(b, true, checkCRC)
}

func serializeFrame(b gopacket.SerializeBuffer, f *mpa.Frame) error {
	buf, err := b.PrependBytes(f.Len())
	if err != nil {
		return err
	}
	f.Append(buf[:0])
	return nil
}

// serializeFPDU frames the buffer's current contents (a DDP segment) as one
// FPDU with mpa.Sender.
func serializeFPDU(b gopacket.SerializeBuffer, crc bool) error {
	fpdu := mpa.NewSender(crc, false).AppendFPDU(nil, b.Bytes())
	n := len(b.Bytes())
	return wrap(b, fpdu[:mpa.LengthFieldLen], fpdu[mpa.LengthFieldLen+n:])
}

// serializeDatagram wraps the buffer's current contents (a DDP segment, or
// nothing for an RD ACK) with dgram.AppendUD or AppendRD, using d's keys
// (and RD header).
func serializeDatagram(b gopacket.SerializeBuffer, d *dgram.Datagram, rd, crc bool) error {
	seg := b.Bytes()
	var out []byte
	if rd {
		out = dgram.AppendRD(nil, d.Keys, &d.RD, crc, seg)
	} else {
		out = dgram.AppendUD(nil, d.Keys, crc, seg)
	}
	hl := len(out) - len(seg) - 4
	return wrap(b, out[:hl], out[hl+len(seg):])
}

// wrap puts head before and tail after the buffer's contents. Each slice
// from the buffer is filled at once: a later Prepend/Append may move it.
func wrap(b gopacket.SerializeBuffer, head, tail []byte) error {
	h, err := b.PrependBytes(len(head))
	if err != nil {
		return err
	}
	copy(h, head)
	t, err := b.AppendBytes(len(tail))
	if err != nil {
		return err
	}
	copy(t, tail)
	return nil
}

func appendReadRequest(b []byte, r *rdmap.ReadRequest) []byte { return r.Append(b) }
func appendTerminate(b []byte, t *rdmap.Terminate) []byte     { return t.Append(b) }
func appendWriteRecord(b []byte, w *rdmap.WriteRecord) []byte { return w.Append(b) }

// checkRDHeader reports RD header bits the codec accepts but a conforming
// sender never sets.
func checkRDHeader(h *dgram.RDHeader) []finding {
	var fs []finding
	if r := h.Flags & dgram.FlagsReserved; r != 0 {
		fs = append(fs, violationf("RD header reserved flag bits 0x%x set", r))
	}
	block := h.Type == dgram.RDAck && h.Flags&dgram.FlagSACKBlock != 0 // Seq is the bitmap's base
	if h.Type != dgram.RDData && h.Seq != 0 && !block {
		fs = append(fs, violationf("RD ACK with sequence number %d (want 0)", h.Seq))
	}
	return fs
}
