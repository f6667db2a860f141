package rd

import (
	"net/netip"
	"time"

	"github.com/iwarpd/iwarpd/verbsd/rnic"
)

// CRC use on an RD QP is a per-QP setting agreed out of band by the
// applications (datagram-iwarp.md §4; proto.CreateQPRequest.NoCRC, the
// provider's FI_IWARPD_DGRAM_CRC): a QP with CRC off sends a trailer of 0
// and checks none; a QP with it on drops every datagram whose trailer does
// not match (drop_crc). Ends that disagree therefore lose each other's
// DATA or ACKs, and the side whose datagrams go unacknowledged fails its
// work requests with WCRetryExcErr once the retransmissions run out. The
// drop itself is silent on the wire, so the daemon says once per QP what
// it saw and what to do (docs/rd.md "CRC").

// badCRC records a datagram from src dropped for its CRC trailer (the
// value it carried) and logs the first of the QP at info, through the
// device's EventLog limiter (docs/iwarpd.md "Logging"); the later ones
// are counted only (drop_crc).
func badCRC(q *QP, src netip.AddrPort, trailer uint32) {
	r := q.Rd
	r.crcDrops++
	if r.crcDrops > 1 {
		return
	}
	dev := q.Session.Dev
	ok, n := dev.EventLog.Allow(time.Now())
	if !ok {
		return
	}
	why := "corrupted on the way, or that peer's QP has CRC off"
	if trailer == 0 {
		why = "a trailer of 0: that peer's QP most likely has CRC off"
	}
	dev.Log.Infof("session %d (pid %d): RD QP %d (QPN %d): datagram from %v dropped: its CRC32c trailer %#08x does "+
		"not match (%s) while this QP checks CRC; both ends of an RD QP must agree on CRC — with the libfabric "+
		"provider every rank of a job must set FI_IWARPD_DGRAM_CRC alike (docs/libfabric.md); later drops of "+
		"this QP are counted in drop_crc only%s", q.Session.ID, q.Session.Cred.Pid, q.Handle, q.QPN, src, trailer, why,
		rnic.Note(n))
}

// crcHint is what logDead adds when the QP dropped datagrams for their
// CRC: a peer that seems dead may be one with the other CRC setting.
func crcHint(q *QP) string {
	if q.Rd.crcDrops == 0 {
		return ""
	}
	return "; this QP dropped datagrams for a bad CRC (drop_crc): the peer's CRC setting may differ from this " +
		"QP's (FI_IWARPD_DGRAM_CRC must be set alike on every rank, docs/libfabric.md)"
}
