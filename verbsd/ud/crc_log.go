package ud

import (
	"net/netip"
	"time"

	"github.com/iwarpd/iwarpd/verbsd/rnic"
)

// badCRC logs, once per QP and through the device's EventLog limiter
// (docs/iwarpd.md "Logging"), the first datagram from src a UD QP with
// CRC on dropped for its CRC32c trailer: CRC use is agreed out of band
// (datagram-iwarp.md §4), a peer with CRC off sends a trailer of 0, and UD
// has no retransmission to fail, so without this line the datagrams are
// only counted (drop_crc). The RD twin is verbsd/rd badCRC.
func (q *QP) badCRC(src netip.AddrPort, trailer uint32) {
	if q.crcLogged {
		return
	}
	q.crcLogged = true
	dev := q.Session.Dev
	ok, n := dev.EventLog.Allow(time.Now())
	if !ok {
		return
	}
	why := "corrupted on the way, or that peer's QP has CRC off"
	if trailer == 0 {
		why = "a trailer of 0: that peer's QP most likely has CRC off"
	}
	dev.Log.Infof("session %d (pid %d): UD QP %d (QPN %d): datagram from %v dropped: its CRC32c trailer %#08x does "+
		"not match (%s) while this QP checks CRC; both ends must agree on CRC — with the libfabric provider every "+
		"rank of a job must set FI_IWARPD_DGRAM_CRC alike (docs/libfabric.md); later drops of this QP are counted "+
		"in drop_crc only%s", q.Session.ID, q.Session.Cred.Pid, q.Handle, q.QPN, src, trailer, why, rnic.Note(n))
}
