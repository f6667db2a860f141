package proto

// The RD halves of the fast-path page (docs/design-small-messages.md "RD
// protocol state: what moves to shared memory"; docs/fastpath.md "The RD
// halves"). An RD QP's page is FastpathRDPageLen octets: the first page is
// laid out as a UD QP's (proto/fastpath.go: Magic, Version, Owner, Busy,
// Want, Lease, counters), followed at OffFPRDSlots by FPRDSlots peer slots
// of FPRDSlotLen octets, and from OffFPRDCopies by the datagram copies of
// the slots' outstanding rings.
//
// When the daemon gives the socket to the rank it writes a slot for each
// peer whose steady state the rank may serve (proven, nothing outstanding
// of the daemon's, nothing held, no NOTREADY, no Challenge): the read-only
// part (the peer's address and Q_Key, the incarnations, the window to
// advertise, how many datagrams the rank may have in flight) and the
// starting values of the send and receive halves; every other slot has
// State 0. While the rank owns the socket it alone writes the halves; when
// the daemon takes the socket back (lease expiry, Want, its own work, the
// oldest outstanding datagram's RTO) it copies them once and checks every
// field against what it exported (verbsd/rd fastpath_import.go): a field
// out of its bounds fails the QP (ERROR), never the engine. Serial-number
// order (RFC 1982) throughout.
//
// One word of the QP's, beside the UD words of the first page:
//
//	160  SendMSN  u32  the last MSN of QN 0 (Sends) the QP used; the daemon
//	                   writes it at the hand-back, the rank numbers its Sends
//	                   on from it, the daemon takes it back at the take-over
//	                   (any value: an MSN only names a message of the QP's)
//	164  ReadReqMSN u32  the same for QN 1 (Read Requests and Atomic
//	                   Requests, which share it): the rank numbers the
//	                   requests it sends itself on from it
//	172  AtomicRespMSN u32  the same for QN 3 (Atomic Responses, RFC 7306):
//	                   the rank numbers the Atomic Responses it sends itself
//	                   on from it (MSN of QN n at 160 + 4n)
//	176  NextReqID u32  the last Request Identifier of an Atomic Request the
//	                   QP sent (RFC 7306 §5.1): the rank's atomics continue
//	                   the daemon's sequence, so that no identifier repeats
//	                   on the QP (the target's replay cache keys on it)
//
// The rank's outstanding requests (issue 22, docs/fastpath.md "Reads and
// atomics the rank sends itself"): FPRDReqs entries of FPRDReqLen at
// OffFPRDReqs, and the response of entry k at OffFPRDReqData + k·FPRDCopyLen
// (written by the daemon only: a Read's octets, an atomic's original value
// in host order):
//
//	0    State    u32  0 free; FPRDReqSent (the rank sent it, awaiting its
//	                   response); FPRDReqDone / FPRDReqFailed (the daemon
//	                   took it over and its response or error message came)
//	4    Kind     u32  FPRDReqRead or FPRDReqAtomic
//	8    Slot     u32  the peer's slot
//	12   MSN      u32  its MSN of QN 1
//	16   ID       u32  Read: the Data Sink STag it named; atomic: its Request Identifier
//	20   Len      u32  Read: octets (1..FPRDCopyLen); atomic: 8
//	24   SinkTO   u64  Read: the Data Sink Tagged Offset it named
//	32   Status   u32  FPRDReqFailed: the work completion status (proto.WCStatus)
//	36   Term     u32  FPRDReqFailed: the error message's iWARP error, 0 if none
//
// Slot i lies at OffFPRDSlots + i·FPRDSlotLen; its fields, at these
// offsets within it (little-endian, naturally aligned):
//
//	read-only for the rank (written by the daemon at the hand-back)
//	0    State    u32  FPRDValid | FPRDSend | FPRDRecv, 0: no peer
//	4    Port     u16  the peer's UDP port
//	8    Addr     16   the peer's address (IPv4 as ::ffff:a.b.c.d)
//	24   QKey     u32  the peer QP's Q_Key as the QP knows it (key header)
//	28   AdvWnd   u16  the Window the rank advertises in its acks
//	32   OurInc   u32  our incarnation towards the peer (Sender Incarnation)
//	36   PeerInc  u32  the peer's incarnation (Echoed Incarnation)
//	40   Cookie   u32  the daemon's cookie state (information)
//	44   InFlight u32  most datagrams the rank may have outstanding (<= FPRDRing)
//	48   RTO      i64  the daemon's retransmission timeout for the peer, ns
//	send half (the rank's while it owns the socket)
//	64   NextSeq  u32  the next sequence number it assigns
//	68   SndUna   u32  oldest not acknowledged (= NextSeq when none)
//	72   AckCum   u32  newest Cumulative Ack received
//	76   Limit    u32  first sequence number beyond the peer's window (AckCum + its Window)
//	80   OutHead  u32  ring index of SndUna's entry (< FPRDRing)
//	84   OutN     u32  entries outstanding: NextSeq − SndUna
//	receive half
//	96   RcvNext  u32  next sequence number expected (the Cumulative Ack to send)
//	100  Unacked  u32  DATA taken since the last acknowledgement sent
//	104  AckDue   u32  1: an acknowledgement is owed
//	the outstanding ring, FPRDRing entries of FPRDEntryLen at 128
//	+0   Seq      u32  its sequence number (SndUna + its distance from OutHead)
//	+4   Len      u32  octets of its copy (FPRDMinBody..FPRDCopyLen)
//	+8   SentAt   i64  CLOCK_MONOTONIC ns of its transmission
//
// The copy of ring entry j of slot i, at OffFPRDCopies + (i·FPRDRing +
// j)·FPRDCopyLen, is the datagram the rank sent without its key header, RD
// header and CRC trailer — DDP header, RDMAP header or Immediate Data,
// payload —: what the daemon sends again, with an RD header of its own
// and the CRC, when the datagram must be retransmitted.
const (
	FastpathRDPageLen = PageSize + FPRDSlots*FPRDRing*FPRDCopyLen + FPRDReqs*FPRDCopyLen

	FPRDSlots    = 4    // peers the rank serves itself at once
	FPRDRing     = 16   // datagrams the rank may have outstanding per peer
	FPRDCopyLen  = 2048 // largest copy of one datagram (DDP header on)
	FPRDMinBody  = 18   // smallest copy: an untagged DDP header (RFC 5041 §4.3)
	FPRDSlotLen  = 512
	FPRDEntryLen = 16

	OffFPRDSendMSN       = 160
	OffFPRDReadReqMSN    = 164
	OffFPRDAtomicRespMSN = 172
	OffFPRDNextReqID     = 176
	OffFPRDReqs          = OffFPRDSlots + FPRDSlots*FPRDSlotLen // 2304
	OffFPRDReqData       = PageSize + FPRDSlots*FPRDRing*FPRDCopyLen
	FPRDReqs             = 8 // requests the rank may have outstanding at once
	FPRDReqLen           = 48

	OffFPRDReqState  = 0
	OffFPRDReqKind   = 4
	OffFPRDReqSlot   = 8
	OffFPRDReqMSN    = 12
	OffFPRDReqID     = 16
	OffFPRDReqLenW   = 20
	OffFPRDReqSinkTO = 24
	OffFPRDReqStatus = 32
	OffFPRDReqTerm   = 36

	FPRDReqSent   uint32 = 1
	FPRDReqDone   uint32 = 2
	FPRDReqFailed uint32 = 3
	FPRDReqRead   uint32 = 1
	FPRDReqAtomic uint32 = 2
	OffFPRDSlots         = 256
	OffFPRDCopies        = PageSize

	OffFPRDState    = 0
	OffFPRDPort     = 4
	OffFPRDAddr     = 8
	OffFPRDQKey     = 24
	OffFPRDAdvWnd   = 28
	OffFPRDOurInc   = 32
	OffFPRDPeerInc  = 36
	OffFPRDCookie   = 40
	OffFPRDInFlight = 44
	OffFPRDRTO      = 48
	OffFPRDNextSeq  = 64
	OffFPRDSndUna   = 68
	OffFPRDAckCum   = 72
	OffFPRDLimit    = 76
	OffFPRDOutHead  = 80
	OffFPRDOutN     = 84
	OffFPRDRcvNext  = 96
	OffFPRDUnacked  = 100
	OffFPRDAckDue   = 104
	OffFPRDRing     = 128

	OffFPRDEntrySeq    = 0
	OffFPRDEntryLen    = 4
	OffFPRDEntrySentAt = 8

	FPRDValid uint32 = 1 // the slot names a peer
	FPRDSend  uint32 = 2 // the rank may send DATA to it (its space was acknowledged)
	FPRDRecv  uint32 = 4 // the rank may take its DATA in order (a receive space exists)
)

// FPRDSlotOff is the offset of slot i in the page.
func FPRDSlotOff(i int) int { return OffFPRDSlots + i*FPRDSlotLen }

// FPRDCopyOff is the offset of the copy of ring entry j of slot i.
func FPRDCopyOff(i, j int) int { return OffFPRDCopies + (i*FPRDRing+j)*FPRDCopyLen }

// FPRDReqOff is the offset of request entry k in the page.
func FPRDReqOff(k int) int { return OffFPRDReqs + k*FPRDReqLen }

// FPRDReqDataOff is the offset of request entry k's response in the page.
func FPRDReqDataOff(k int) int { return OffFPRDReqData + k*FPRDCopyLen }

// FastpathPageLenOf is the length of a page for a QP of type t: the RD
// halves make an RD QP's longer.
func FastpathPageLenOf(t QPType) int {
	if t == QPTypeRD {
		return FastpathRDPageLen
	}
	return FastpathPageLen
}
