/*
 * fastpath_rx.c — parsing and classifying a received datagram for the
 * rank's fast path (fastpath.h; docs/design-small-messages.md "Security":
 * the rank takes only RD DATA of an untagged Send in order from a proven
 * peer, and ACKs; anything else stays the daemon's). The framing checks
 * are those of dgram.ParseRD / ParseUD and the daemon's receive paths
 * (verbsd/rd recv.go datagram, verbsd/ud recv.go datagram), in their
 * order; every read is preceded by a check of n.
 */
#include <string.h>

#include "fastpath.h"

static inline uint32_t get32(const uint8_t *b)
{
	return (uint32_t)b[0] << 24 | (uint32_t)b[1] << 16 | (uint32_t)b[2] << 8 | b[3];
}

static inline uint32_t get32le(const uint8_t *b)
{
	return (uint32_t)b[3] << 24 | (uint32_t)b[2] << 16 | (uint32_t)b[1] << 8 | b[0];
}

static enum fp_class daemon(struct fp_rx *out, enum fp_reason r)
{
	out->reason = r;
	return FP_CLASS_DAEMON;
}

/* The CRC rule (wire-format.md §6): the trailer covers b[0, n-4). */
static int crc_ok(const uint8_t *b, size_t n, const struct fp_rx_qp *qp, struct fp_rx *out)
{
	out->crc = get32le(b + n - FP_CRC_LEN);
	return !qp->crc || iwvi_fp_crc32c(0, b, n - FP_CRC_LEN) == out->crc;
}

/* The untagged Send segment seg[0, n) (n ≥ FP_DDP_UNTAGGED_LEN when
 * untagged; the caller checked at least FP_DDP_TAGGED_LEN), starting at
 * offset base of the datagram. */
static enum fp_class send_segment(const uint8_t *seg, size_t n, size_t base, struct fp_rx *out)
{
	out->has_ddp = 1;
	out->tagged = (seg[0] & 0x80) != 0;
	out->last = (seg[0] & 0x40) != 0;
	out->opcode = seg[1] & 0x0f;
	if (out->tagged)
		return daemon(out, FP_R_TAGGED);
	out->qn = get32(seg + 6);
	out->msn = get32(seg + 10);
	out->mo = get32(seg + 14);
	if ((seg[0] & 0x03) != 1)
		return daemon(out, FP_R_DDP_VERSION);
	if (seg[1] >> 6 != 1)
		return daemon(out, FP_R_RDMAP_VERSION);
	switch (out->opcode) {
	case FP_OP_SEND:
	case FP_OP_SEND_SE:
		break;
	case FP_OP_IMMEDIATE:
	case FP_OP_IMMEDIATE_SE:
		out->has_imm = 1;
		break;
	default:
		return daemon(out, FP_R_OPCODE);
	}
	out->solicited = out->opcode == FP_OP_SEND_SE || out->opcode == FP_OP_IMMEDIATE_SE;
	if (out->qn != 0)
		return daemon(out, FP_R_QN);
	size_t hl = FP_DDP_UNTAGGED_LEN;
	if (out->has_imm) {
		if (n < hl + FP_IMM_LEN)
			return daemon(out, FP_R_SHORT_IMM);
		out->imm = get32(seg + hl);
		hl += FP_IMM_LEN;
	}
	if (out->mo != 0 || !out->last)
		return daemon(out, FP_R_SEGMENTED);
	out->payload_off = (uint32_t)(base + hl);
	out->payload_len = (uint32_t)(n - hl);
	return FP_CLASS_SEND;
}

/* The acknowledgement fields of h, valid (A set), judged against peer. */
static int ack_ok(const struct fp_rd_hdr *h, const struct fp_rd_peer *peer, struct fp_rx *out)
{
	if (h->sack != 0) {
		out->reason = FP_R_SACK;
		return 0;
	}
	if (!fp_seq_less_eq(peer->snd_una, h->cum_ack) || !fp_seq_less_eq(h->cum_ack, peer->snd_next)) {
		out->reason = FP_R_ACK_RANGE;
		return 0;
	}
	return 1;
}

enum fp_class iwvi_fp_rd_classify(const uint8_t *b, size_t n, const struct fp_rx_qp *qp,
				  const struct fp_rd_peer *peer, struct fp_rx *out)
{
	memset(out, 0, sizeof *out);
	if (n >= FP_KEYS_LEN) {
		out->qkey = get32(b);
		out->src_qkey = get32(b + 4);
		if (out->qkey != qp->qkey)
			return daemon(out, FP_R_QKEY); /* judged first (wire-format.md §5.1) */
	}
	if (n < FP_KEYS_LEN + FP_RD_HDR_LEN + FP_CRC_LEN || n > FP_MAX_DATAGRAM)
		return daemon(out, FP_R_TRUNCATED);
	if (!crc_ok(b, n, qp, out))
		return daemon(out, FP_R_CRC);
	const uint8_t *r = b + FP_KEYS_LEN;
	struct fp_rd_hdr *h = &out->rd;
	out->rd_version = r[0] >> 4;
	h->type = r[0] & 0x0f;
	h->flags = r[1];
	h->window = (uint16_t)(r[2] << 8 | r[3]);
	h->inc = get32(r + 4);
	h->echoed = get32(r + 8);
	h->seq = get32(r + 12);
	h->cum_ack = get32(r + 16);
	h->sack = get32(r + 20);
	out->has_rd = 1;
	if (out->rd_version != FP_RD_VERSION)
		return daemon(out, FP_R_RD_VERSION);
	size_t segoff = FP_KEYS_LEN + FP_RD_HDR_LEN;
	size_t seglen = n - FP_CRC_LEN - segoff;
	switch (h->type) {
	case FP_RD_ACK:
		if (seglen != 0)
			return daemon(out, FP_R_RD_TYPE);
		break;
	case FP_RD_DATA:
		/* dgram.ParseRD's segment(seg, whole): the whole DDP header. */
		if (seglen < FP_DDP_TAGGED_LEN || (!(b[segoff] & 0x80) && seglen < FP_DDP_UNTAGGED_LEN))
			return daemon(out, FP_R_TRUNCATED);
		break;
	default:
		return daemon(out, FP_R_RD_TYPE);
	}
	out->acked = (h->flags & FP_RDF_ACK) != 0;
	uint8_t bad = FP_RDF_NOTREADY | FP_RDF_RESET | FP_RDF_SACKBLOCK | FP_RDF_CHALLENGE;
	if ((h->flags & bad) || !(h->flags & FP_RDF_EXTSACK) || (h->type == FP_RD_ACK && !out->acked))
		return daemon(out, FP_R_FLAGS);
	if (!peer)
		return daemon(out, FP_R_NO_PEER);
	if (h->inc != peer->peer_inc)
		return daemon(out, FP_R_INCARNATION);
	if (h->echoed != peer->our_inc)
		return daemon(out, FP_R_ECHOED);
	if (h->type == FP_RD_DATA && h->seq != peer->rcv_next)
		return daemon(out, FP_R_SEQ);
	if (out->acked && !ack_ok(h, peer, out))
		return FP_CLASS_DAEMON;
	if (h->type == FP_RD_ACK)
		return FP_CLASS_ACK;
	return send_segment(b + segoff, seglen, segoff, out);
}

enum fp_class iwvi_fp_ud_classify(const uint8_t *b, size_t n, const struct fp_rx_qp *qp, struct fp_rx *out)
{
	memset(out, 0, sizeof *out);
	/* verbsd/ud recv.go datagram: the length first, then the key. */
	if (n < FP_KEYS_LEN + FP_DDP_TAGGED_LEN + FP_CRC_LEN || n > FP_MAX_DATAGRAM)
		return daemon(out, FP_R_TRUNCATED);
	out->qkey = get32(b);
	out->src_qkey = get32(b + 4);
	if (out->qkey != qp->qkey)
		return daemon(out, FP_R_QKEY);
	if (!crc_ok(b, n, qp, out))
		return daemon(out, FP_R_CRC);
	size_t seglen = n - FP_CRC_LEN - FP_KEYS_LEN;
	if (!(b[FP_KEYS_LEN] & 0x80) && seglen < FP_DDP_UNTAGGED_LEN)
		return daemon(out, FP_R_TRUNCATED);
	return send_segment(b + FP_KEYS_LEN, seglen, FP_KEYS_LEN, out);
}

const char *iwvi_fp_reason_name(enum fp_reason r)
{
	static const char *const names[FP_R_COUNT] = {
		[FP_R_NONE] = "none",
		[FP_R_TRUNCATED] = "truncated",
		[FP_R_QKEY] = "qkey",
		[FP_R_CRC] = "crc",
		[FP_R_RD_VERSION] = "rd-version",
		[FP_R_RD_TYPE] = "rd-type",
		[FP_R_FLAGS] = "flags",
		[FP_R_NO_PEER] = "no-peer",
		[FP_R_INCARNATION] = "incarnation",
		[FP_R_ECHOED] = "echoed",
		[FP_R_SEQ] = "seq",
		[FP_R_SACK] = "sack",
		[FP_R_ACK_RANGE] = "ack-range",
		[FP_R_TAGGED] = "tagged",
		[FP_R_DDP_VERSION] = "ddp-version",
		[FP_R_RDMAP_VERSION] = "rdmap-version",
		[FP_R_OPCODE] = "opcode",
		[FP_R_QN] = "qn",
		[FP_R_SHORT_IMM] = "short-imm",
		[FP_R_SEGMENTED] = "segmented",
		[FP_R_COALESCED] = "coalesced",
	};
	if ((unsigned)r >= FP_R_COUNT)
		return "?";
	return names[r];
}
