package proto

// The fast-path page of a datagram QP (ABI 5, OpFastpathPage;
// docs/design-small-messages.md "Security: a socket in the client's hands",
// "the hand-over"; docs/fastpath.md). A client that made its UD QP's
// socket itself (CreateQPRequest.Socket) may read that socket itself
// while it polls: it makes a page (a sealed memfd, as its rings),
// writes Magic and Version, and hands it over with OpFastpathPage
// (descriptor 0). From then on the socket has one reader at a time,
// decided by the words below; a QP whose client never hands a page is
// served as before.
//
// Layout (little-endian; each word naturally aligned and accessed
// atomically by both sides):
//
//	0    Magic     u32  "IWFP", written by the client before the hand-over
//	4    Version   u16  FastpathVersion
//	6    Flags     u16  FPFlag* bits, written by the client before the
//	                    hand-over (read once, at OpFastpathPage)
//	64   Owner     u32  who reads the socket: FPOwnerDaemon or FPOwnerRank.
//	                    The daemon writes FPOwnerDaemon at the hand-over,
//	                    FPOwnerRank when it gives the socket back (Want),
//	                    and FPOwnerDaemon by compare-and-swap when the
//	                    lease expired (a take-over); the rank writes
//	                    FPOwnerDaemon by compare-and-swap to give it up.
//	68   Busy      u32  the rank: non-zero while it may be reading (set,
//	                    full barrier, then it loads Owner; cleared after
//	                    its last read). The daemon reads the socket only
//	                    when it owns it and has seen Busy clear after its
//	                    take-over (Dekker: one of the two sees the other).
//	72   Want      u32  the rank: non-zero asks the socket back; the daemon
//	                    clears it when it gives the socket back, at the end
//	                    of a pass, after the completions of what it read.
//	80   Lease     i64  the rank's last renewal, CLOCK_MONOTONIC ns; the
//	                    daemon writes its own clock there when it gives the
//	                    socket back. Older than -fastpath-lease: the daemon
//	                    takes the socket over.
//	128  Takeovers u64  written by the daemon (information for the rank;
//	136  Handbacks u64  the daemon's own counts are what iwarpctl shows)
//	144  Releases  u64
//
// Everything the daemon reads here is the client's and distrusted: an
// Owner that is neither value, or FPOwnerRank while the daemon owns the
// socket, moves the QP to ERROR (the fast path ends for it); a Busy never
// cleared stalls only this QP's reception (the daemon never waits for it);
// a Lease in the future (beyond FPLeaseSkew) counts as expired.
const (
	FastpathMagic   uint32 = 0x50465749 // "IWFP"
	FastpathVersion uint16 = 1
	// FPFlagGRO: the rank reads its socket with UDP_GRO on — it takes the
	// UDP_GRO control message of every datagram it peeks at and leaves a
	// coalesced buffer (several datagrams) to the daemon — so the daemon
	// keeps UDP_GRO on the socket (a multi-datagram message then reaches
	// it as one buffer per GSO send). Without it the daemon turns UDP_GRO
	// off before it first gives the socket to the rank, over an empty
	// queue (docs/fastpath.md "UDP_GRO stays on for a rank that reads it",
	// "UDP_GRO goes off only over an empty queue").
	FPFlagGRO       uint16 = 1
	FastpathPageLen        = PageSize

	OffFPMagic     = 0
	OffFPVersion   = 4
	OffFPFlags     = 6
	OffFPOwner     = 64
	OffFPBusy      = 68
	OffFPWant      = 72
	OffFPLease     = 80
	OffFPTakeovers = 128
	OffFPHandbacks = 136
	OffFPReleases  = 144

	FPOwnerDaemon uint32 = 1
	FPOwnerRank   uint32 = 2

	// FPLeaseSkew is how far in the future a Lease may lie and still
	// count as a renewal now (the two sides read CLOCK_MONOTONIC at
	// slightly different moments); further is garbage: expired.
	FPLeaseSkew = 1_000_000_000
)

// FastpathPageRequest (OpFastpathPage, ABI 5) hands the fast-path page of
// QP (a UD or RD QP of the session whose socket is the client's own) to
// the daemon: descriptor 0 is the page's memfd, sealed against shrinking
// and growing, FastpathPageLenOf the QP's type octets (an RD QP's carries
// its RD halves, proto/fastpath_rd.go), Magic and Version written. The daemon
// owns the socket at first (Owner = FPOwnerDaemon); the rank asks for it
// with Want. Once per QP; the reply is empty.
type FastpathPageRequest struct {
	QP uint32 `json:"qp"`
}
