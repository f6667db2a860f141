/*
 * fastpath.h — the datagram codec of the rank's fast path (issue 20,
 * docs/design-small-messages.md, build plan steps 3–5).
 *
 * It builds, byte for byte as the daemon builds them, and parses the eager
 * datagrams a rank will send and receive itself on its QP's own UDP socket:
 * the datagram profile of docs/wire-format.md (§5 key header, §6 UD, §7 RD
 * header, §4.6 Immediate Data, §1 CRC32c), whose reference encoders are
 * llp/dgram (AppendRD, AppendUD, RDHeader.Append), ddp (Header.Append,
 * UntaggedSegments) and rdmap (MakeControl, MakeImmediateData) as
 * verbsd/rd (send.go batch.add) and verbsd/ud (send.go) use them.
 *
 * Internal to libiwverbs (every symbol iwvi_fp_*, hidden): no allocation,
 * no system call, no lock; every function is safe to call from any thread.
 * Parsing never trusts a length: every field read is bounds-checked against
 * the datagram's size first. test/fastpath cross-checks both directions
 * against the Go encoders and decoders.
 */
#ifndef IWV_FASTPATH_H
#define IWV_FASTPATH_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>
#include <sys/uio.h>

/* Sizes (docs/wire-format.md §1, §3, §4.6, §5.1, §6, §7.1). */
#define FP_KEYS_LEN 8          /* key header: Q_Key, Source Q_Key */
#define FP_RD_HDR_LEN 24       /* RD header */
#define FP_DDP_TAGGED_LEN 14   /* RFC 5041 §4.2 */
#define FP_DDP_UNTAGGED_LEN 18 /* RFC 5041 §4.3 */
#define FP_IMM_LEN 8           /* RFC 7306 Immediate Data */
#define FP_CRC_LEN 4           /* CRC32c trailer, little-endian */
#define FP_MAX_HDR (FP_KEYS_LEN + FP_RD_HDR_LEN + FP_DDP_UNTAGGED_LEN + FP_IMM_LEN) /* 58 */
#define FP_RD_ACK_LEN (FP_KEYS_LEN + FP_RD_HDR_LEN + FP_CRC_LEN)                   /* 36 */
#define FP_MAX_DATAGRAM 65507  /* largest UDP payload over IPv4 (dgram.MaxDatagramSize) */

/* RD header (§7.1): version 1, types, flag octet. */
#define FP_RD_VERSION 1
#define FP_RD_DATA 1
#define FP_RD_ACK 2
#define FP_RDF_ACK 0x80       /* A: Window, Echoed, CumAck, SACK valid */
#define FP_RDF_ACKREQ 0x40    /* Q: acknowledge now */
#define FP_RDF_NOTREADY 0x20  /* N: RNR, retry CumAck after a back-off */
#define FP_RDF_RESET 0x10     /* R: no state for the incarnation pair */
#define FP_RDF_EXTSACK 0x08   /* X: takes SACK Block ACKs (set by iwarpd on all but RESET) */
#define FP_RDF_SACKBLOCK 0x04 /* B: SACK bitmap based at Sequence Number */
#define FP_RDF_CHALLENGE 0x02 /* C: cookie challenge */

/* RDMAP opcodes (RFC 5040 §4.3, RFC 7306; 0xC, 0xD iwarpd profile). */
enum fp_opcode {
	FP_OP_WRITE = 0x0,
	FP_OP_READ_REQUEST = 0x1,
	FP_OP_READ_RESPONSE = 0x2,
	FP_OP_SEND = 0x3,
	FP_OP_SEND_INVALIDATE = 0x4,
	FP_OP_SEND_SE = 0x5,
	FP_OP_SEND_SE_INVALIDATE = 0x6,
	FP_OP_TERMINATE = 0x7,
	FP_OP_IMMEDIATE = 0x8,
	FP_OP_IMMEDIATE_SE = 0x9,
	FP_OP_ATOMIC_REQUEST = 0xa,
	FP_OP_ATOMIC_RESPONSE = 0xb,
	FP_OP_WRITE_RECORD = 0xc,
	FP_OP_WRITE_RECORD_IMM = 0xd,
};

/* The 24-octet RD header, host order (dgram.RDHeader; Version is always
 * FP_RD_VERSION on what is built and accepted). */
struct fp_rd_hdr {
	uint8_t type;    /* FP_RD_DATA or FP_RD_ACK */
	uint8_t flags;   /* FP_RDF_* */
	uint16_t window; /* datagrams accepted from CumAck on (valid with A) */
	uint32_t inc;    /* Sender Incarnation */
	uint32_t echoed; /* Echoed Incarnation */
	uint32_t seq;    /* Sequence Number (DATA); 0 on ACK, or the SACK Block base */
	uint32_t cum_ack;
	uint32_t sack;
};

/* One untagged Send segment as the daemon builds it (verbsd/rd prepare,
 * verbsd/ud prepareSend): opcode Send / Send with SE, or with has_imm the
 * profile's Send with Immediate (opcode 0x8 / 0x9, the 8 octets of
 * Immediate Data — imm big-endian, then 4 zero octets — before the payload
 * of every segment, MO counting payload octets only); QN 0, RsvdULP 0,
 * DDP and RDMAP version 1. */
struct fp_send {
	uint32_t qkey;     /* destination QP's Q_Key */
	uint32_t src_qkey; /* our QP's Q_Key */
	uint32_t msn;      /* QN 0 message sequence number (first 1) */
	uint32_t mo;       /* offset of this segment's payload in the message */
	uint32_t imm;      /* with has_imm */
	uint8_t solicited; /* Send with Solicited Event */
	uint8_t has_imm;   /* Send with Immediate */
	uint8_t last;      /* L: last segment of the message */
	uint8_t crc;       /* CRC on (else the trailer is 0, wire-format.md §6 rule 4) */
};

/* A datagram ready for sendmsg(2) without copying its payload:
 * iov = { header, payload (left out when empty), trailer }. */
struct fp_dgram {
	uint8_t hdr[FP_MAX_HDR];
	uint8_t trailer[FP_CRC_LEN];
	struct iovec iov[3];
	int iovcnt;
	size_t len; /* octets of the whole datagram */
};

/* ---- CRC32c (fastpath_crc.c): Castagnoli, reflected, init and xorout
 * 0xFFFFFFFF. crc is a finished value (0 to start), as Go's
 * crc32.Update: iwvi_fp_crc32c(iwvi_fp_crc32c(0, a), b) is the CRC of a|b.
 * SSE4.2 crc32 instructions when the CPU has them (cpuid, checked once),
 * a table otherwise. */
uint32_t iwvi_fp_crc32c(uint32_t crc, const void *p, size_t n);
uint32_t iwvi_fp_crc32c_table(uint32_t crc, const void *p, size_t n);
uint32_t iwvi_fp_crc32c_hw(uint32_t crc, const void *p, size_t n); /* only if iwvi_fp_crc32c_has_hw() */
int iwvi_fp_crc32c_has_hw(void);

/* ---- Building (fastpath_tx.c). rd NULL: a UD datagram (keys | DDP |
 * [imm] | payload | CRC); else RD DATA (keys | RD header | DDP | [imm] |
 * payload | CRC) with rd's fields (its type is ignored: DATA). */

/* iwvi_fp_send_hdr writes the headers of s (and rd) into hdr, which has
 * room for FP_MAX_HDR octets, and returns their length. */
size_t iwvi_fp_send_hdr(uint8_t *hdr, const struct fp_send *s, const struct fp_rd_hdr *rd);

/* iwvi_fp_send_iov fills d for payload[0, len): headers, CRC over headers
 * and payload, trailer, iovec. Returns 0, or -EMSGSIZE when the datagram
 * would exceed FP_MAX_DATAGRAM (nothing else is checked: the caller
 * sizes its segments to its datagram size, iwvi_fp_max_payload). */
int iwvi_fp_send_iov(struct fp_dgram *d, const struct fp_send *s, const struct fp_rd_hdr *rd,
		     const void *payload, size_t len);

/* iwvi_fp_send_build writes the whole datagram into buf[0, cap) and
 * returns its length, or -EMSGSIZE (over FP_MAX_DATAGRAM) or -ENOBUFS
 * (cap too small; buf untouched). */
ssize_t iwvi_fp_send_build(uint8_t *buf, size_t cap, const struct fp_send *s, const struct fp_rd_hdr *rd,
			   const void *payload, size_t len);

/* iwvi_fp_rd_ack_build writes an RD ACK-type datagram (keys | rd | CRC;
 * rd's type is ignored: ACK) into buf[0, cap) and returns FP_RD_ACK_LEN,
 * or -ENOBUFS. */
ssize_t iwvi_fp_rd_ack_build(uint8_t *buf, size_t cap, uint32_t qkey, uint32_t src_qkey, const struct fp_rd_hdr *rd,
			     int crc);

/* iwvi_fp_max_payload: the largest Send payload one datagram of
 * datagram_size octets (capped at FP_MAX_DATAGRAM) carries
 * (dgram.MaxSegment − DDP header − imm, as verbsd/rd RdMaxPayload), or 0
 * if none. */
size_t iwvi_fp_max_payload(size_t datagram_size, int rd, int has_imm);

/* ---- Parsing (fastpath_rx.c). */

/* What a received datagram is for the rank. */
enum fp_class {
	FP_CLASS_DAEMON = 0, /* leave it to the daemon (hand the socket over) */
	FP_CLASS_SEND = 1,   /* a whole one-segment Send in order, the rank places it */
	FP_CLASS_ACK = 2,    /* an RD acknowledgement the rank applies */
};

/* Why a datagram is FP_CLASS_DAEMON (0 for the other classes). Reasons up
 * to FP_R_LAST_DROP are datagrams the daemon drops silently and counts
 * (framing: dgram.ParseRD/ParseUD, the Q_Key rule of §5.1); the others it
 * serves. The first failing check is reported: the framing ones in the
 * daemon's order (RD: Q_Key when n ≥ 8, length, CRC, RD version, RD type
 * and DDP header length; UD: length, Q_Key, CRC, DDP header length), then
 * the others in the order of this list. */
enum fp_reason {
	FP_R_NONE = 0,
	FP_R_TRUNCATED,     /* shorter than its framing (keys, RD header, CRC, DDP header), or over FP_MAX_DATAGRAM */
	FP_R_QKEY,          /* Q_Key is not the receiving QP's */
	FP_R_CRC,           /* CRC32c trailer mismatch */
	FP_R_RD_VERSION,    /* RD header version not 1 */
	FP_R_RD_TYPE,       /* RD type neither DATA nor ACK, or an ACK with octets after its header */
	FP_R_LAST_DROP = FP_R_RD_TYPE,
	FP_R_FLAGS,         /* RESET, NOTREADY, Challenge, SACK Block, X clear, or an ACK-type without A */
	FP_R_NO_PEER,       /* RD: no fast-path state for the source (caller passed none) */
	FP_R_INCARNATION,   /* RD: Sender Incarnation is not the peer's recorded one */
	FP_R_ECHOED,        /* RD: Echoed Incarnation is not ours towards the peer */
	FP_R_SEQ,           /* RD DATA: not the next in order (duplicate, hole) */
	FP_R_SACK,          /* RD: acknowledgement with SACK bits (loss recovery) */
	FP_R_ACK_RANGE,     /* RD: CumAck outside [snd_una, snd_next] */
	FP_R_TAGGED,        /* tagged DDP (Write-Record, Read Response, Write) */
	FP_R_DDP_VERSION,   /* DDP DV not 1 */
	FP_R_RDMAP_VERSION, /* RDMAP RV not 1 */
	FP_R_OPCODE,        /* not Send, Send with SE, Immediate Data (SE) */
	FP_R_QN,            /* a Send opcode on a QN other than 0 */
	FP_R_SHORT_IMM,     /* Send with Immediate without its 8 octets */
	FP_R_SEGMENTED,     /* one segment of a larger message (MO ≠ 0 or L clear) */
	FP_R_COALESCED,     /* RD: a UDP_GRO buffer of several datagrams (fprd.c) */
	FP_R_COUNT
};

/* The receiving QP. */
struct fp_rx_qp {
	uint32_t qkey; /* its Q_Key */
	uint8_t crc;   /* CRC on: check the trailer */
};

/* The rank's view of one proven RD peer (its slot in the shared QP page,
 * design-small-messages.md "RD protocol state"). Serial-number order
 * (RFC 1982) for snd_una ≤ CumAck ≤ snd_next. */
struct fp_rd_peer {
	uint32_t our_inc;  /* our incarnation towards the peer (its DATA echoes it) */
	uint32_t peer_inc; /* the peer's incarnation as recorded */
	uint32_t rcv_next; /* the next sequence number expected from it */
	uint32_t snd_una;  /* oldest of ours not acknowledged */
	uint32_t snd_next; /* our next sequence number towards it */
};

/* A parsed datagram. Fields are filled as far as parsing got (a
 * FP_CLASS_DAEMON datagram may have some); payload_off/len lie within
 * the datagram for FP_CLASS_SEND. */
struct fp_rx {
	uint32_t qkey, src_qkey;
	uint32_t crc;         /* the trailer as received */
	struct fp_rd_hdr rd;  /* RD: its header (version in rd_version) */
	uint8_t rd_version;
	uint8_t has_rd;       /* RD header parsed */
	uint8_t acked;        /* RD: A set (ACK, or DATA with a piggybacked ACK): cum_ack, sack, window valid */
	uint8_t has_ddp;      /* DDP header parsed */
	uint8_t tagged, last; /* DDP T, L */
	uint8_t opcode;       /* RDMAP opcode */
	uint8_t solicited;    /* Send with SE / Immediate Data with SE */
	uint8_t has_imm;
	uint32_t qn, msn, mo; /* untagged DDP header */
	uint32_t imm;         /* with has_imm */
	uint32_t payload_off, payload_len;
	enum fp_reason reason;
};

/* iwvi_fp_rd_classify parses the RD datagram b[0, n) received on qp from
 * a source whose state is peer (NULL: none) and classifies it:
 *  - FP_CLASS_SEND: DATA, CRC good, flags only A/Q/X (X set), from
 *    peer_inc, echoing our_inc, seq == rcv_next, any piggybacked A
 *    without SACK bits and with CumAck in [snd_una, snd_next]; an
 *    untagged DDP v1 / RDMAP v1 Send, Send with SE or Immediate Data
 *    (SE) on QN 0, one whole segment (MO 0, L). out->acked says whether
 *    it carries an ACK to apply as well.
 *  - FP_CLASS_ACK: an ACK-type datagram with A (and X, maybe Q), no other
 *    flag, no SACK bits, from peer_inc, echoing our_inc, CumAck in
 *    [snd_una, snd_next].
 *  - FP_CLASS_DAEMON: anything else, out->reason says why. */
enum fp_class iwvi_fp_rd_classify(const uint8_t *b, size_t n, const struct fp_rx_qp *qp,
				  const struct fp_rd_peer *peer, struct fp_rx *out);

/* iwvi_fp_ud_classify: the UD datagram b[0, n): FP_CLASS_SEND for a
 * whole one-segment Send (as above, without the RD rules), else
 * FP_CLASS_DAEMON (Write-Record, error messages, segments of larger
 * messages, anything malformed). */
enum fp_class iwvi_fp_ud_classify(const uint8_t *b, size_t n, const struct fp_rx_qp *qp, struct fp_rx *out);

/* iwvi_fp_reason_name: a short name of r for logs and tests. */
const char *iwvi_fp_reason_name(enum fp_reason r);

/* Serial-number order of sequence numbers (RFC 1982, dgram.SeqLess). */
static inline int fp_seq_less(uint32_t a, uint32_t b)
{
	uint32_t d = b - a;
	return d != 0 && d < 0x80000000u;
}

static inline int fp_seq_less_eq(uint32_t a, uint32_t b)
{
	return a == b || fp_seq_less(a, b);
}

#endif
